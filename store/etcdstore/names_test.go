package etcdstore

import (
	"strings"
	"testing"
)

var nameSeeds = []string{"alice", "a/b", "a%2Fb", "%", "..", ".", "\x00", "a\x00b", "é", " ", "?#", "%zz", ""}

// TestNames: a name never holds "/", two names never make one key, and a
// listed key that is not exactly one escaped name is corrupt.
func TestNames(t *testing.T) {
	seen := map[string]string{}
	for _, s := range nameSeeds {
		e, err := name("x", s)
		if s == "" {
			if err == nil {
				t.Error("an empty name was accepted")
			}
			continue
		}
		if strings.Contains(e, "/") {
			t.Errorf("name(%q) = %q holds /", s, e)
		}
		if o, dup := seen[e]; dup {
			t.Errorf("%q and %q both name %q", s, o, e)
		}
		seen[e] = s
		if back, err := unname("d/", "d/"+e); err != nil || back != s {
			t.Errorf("unname(name(%q)) = %q, %v", s, back, err)
		}
	}
	for _, k := range []string{"d/", "d/a/b", "d/%zz", "d/%41", "e/a", "d/a%2fb"} {
		if n, err := unname("d/", k); err == nil {
			t.Errorf("unname(%q) = %q, want corrupt", k, n)
		}
	}
}

func FuzzNames(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if e, err := name("x", s); err == nil {
			if back, err := unname("d/", "d/"+e); err != nil || back != s || strings.Contains(e, "/") {
				t.Fatalf("%q: %q, %q, %v", s, e, back, err)
			}
		}
		// Any listed key: one name or corrupt, and a name only if it is
		// the escaping of what it decodes to.
		if n, err := unname("d/", "d/"+s); err == nil {
			if e, _ := name("x", n); e != s {
				t.Fatalf("key %q reads as %q, which is stored as %q", s, n, e)
			}
		}
	})
}

var heldSeeds = []string{"h/1", "h/1/2", "h", "h/", "/1", "%zz/1", "h/%2F", "h/%2f", "a%2Fb/1", "../1", "h/..", "", "h//1"}

// TestHeldKeys: a held slot's key is exactly two escaped names below its
// directory; anything else is corrupt.
func TestHeldKeys(t *testing.T) {
	for _, k := range []string{"h/1", "a%2Fb/1", "h/%2F", "../1", "h/.."} {
		if err := heldKey("d/", "d/"+k); err != nil {
			t.Errorf("heldKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"h/1/2", "h", "h/", "/1", "%zz/1", "h/%2f", "", "h//1", "e/h/1"} {
		if err := heldKey("d/", "d/"+k); err == nil {
			t.Errorf("heldKey(%q) accepted", k)
		}
	}
	if err := heldKey("d/", "e/h/1"); err == nil {
		t.Error("a key of another directory accepted")
	}
}

func FuzzHeldKeys(f *testing.F) {
	for _, s := range heldSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if heldKey("d/", "d/"+k) != nil {
			return
		}
		host, n, ok := strings.Cut(k, "/")
		if !ok || host == "" || n == "" || strings.Contains(n, "/") {
			t.Fatalf("%q accepted, not two names", k)
		}
		for _, part := range []string{host, n} {
			if back, err := unname("d/", "d/"+part); err != nil {
				t.Fatalf("%q accepted, part %q: %v", k, part, err)
			} else if e, _ := name("x", back); e != part {
				t.Fatalf("%q accepted, part %q is not an escaping", k, part)
			}
		}
	})
}
