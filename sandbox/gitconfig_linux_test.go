package sandbox

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// resolveRoot makes a workspace (ws) beside links and files that lead
// into it or not, and returns the directory holding them and the
// workspace's path.
func resolveRoot(t testing.TB) (base, root string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(base, "ws")
	for _, d := range []string{"ws/sub", "outside"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"alias": root, "rel-alias": "ws", "chain": "alias", "loop": "loop", "back": "ws/../outside",
		"dots": strings.Repeat("./", 300) + "ws", "proc": "/proc/self/root" + root, "into": "ws/sub", "away": "outside",
	} {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	return base, root
}

// A path git configuration names is inside the workspace as written,
// through links outside it, or not at all; resolving it is bounded
// (links, components, the scan's budget) whatever it is.
func TestConfigPathInRoot(t *testing.T) {
	base, root := resolveRoot(t)
	s := &scanner{rootPath: root, deadline: time.Now().Add(time.Minute), maxEntries: DefaultScanEntries}
	for _, c := range []struct {
		abs, rel string
		err      bool
	}{
		{root + "/sub/x", "sub/x", false},
		{root, "", false},
		{root + "/..", "", false},
		{base + "/alias/sub/x", "sub/x", false},
		{base + "/rel-alias/x", "x", false},
		{base + "/chain/x", "x", false},
		{base + "/proc/x", "x", false},
		{"/proc/self/root" + base + "/alias/x", "x", false},
		{base + "/absent/../ws/x", "", false}, // ".." resolved as the kernel does
		{base + "/alias/../ws/x", "x", false},
		{base + "/into/../sub/x", "sub/x", false},
		{base + "/away/../ws/x", "x", false},
		{root + "/sub/../../ws/x", "x", false},
		{root + "/../outside/x", "", false},
		{base + "/loop/x", "", false},
		{base + "/file/x", "", false},
		{base + "/outside/x", "", false},
		{base + "/back/x", "", false},
		{base + "/absent/x", "", false},
		{strings.Repeat("/proc/self/root", 80) + "/x", "", false}, // past 40 links: git finds nothing either
		{base + "/dots/x", "", true},
		{base + "/alias\x00/x", "", false},
	} {
		rel, ok, err := s.inRoot(c.abs)
		if rel != c.rel || ok != (c.rel != "") || (err != nil) != c.err {
			t.Errorf("inRoot(%.80q) = %q, %v, %v; want %q, error %v", c.abs, rel, ok, err, c.rel, c.err)
		}
	}
	s.deadline = time.Now()
	if _, _, err := s.inRoot(base + "/alias/x"); !errors.Is(err, ErrScanBudget) {
		t.Errorf("out of time: %v, want ErrScanBudget", err)
	}
	if rel, ok, err := s.inRoot(root + "/x"); rel != "x" || !ok || err != nil {
		t.Errorf("as written, out of time: %q %v %v", rel, ok, err)
	}
}

// FuzzConfigPathInRoot: whatever a configuration names, what inRoot
// returns is a clean path inside the workspace, or nothing.
func FuzzConfigPathInRoot(f *testing.F) {
	base, root := resolveRoot(f)
	for _, s := range []string{root + "/sub/x", base + "/alias/x", base + "/loop/x", base + "/back/x", base + "/dots/x",
		"/proc/self/root" + base + "/chain/x", base + "/../../x", "relative", "", "/", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, abs string) {
		if !path.IsAbs(abs) {
			abs = path.Join(root, abs)
		}
		s := &scanner{rootPath: root, deadline: time.Now().Add(time.Second), maxEntries: DefaultScanEntries}
		rel, ok, _ := s.inRoot(abs)
		if !ok {
			if rel != "" {
				t.Fatalf("%q: %q without ok", abs, rel)
			}
			return
		}
		if rel == "." || path.Clean(rel) != rel || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("%q: %q", abs, rel)
		}
	})
}

// The paths a git config names: hostile layouts parse to what git reads,
// or to nothing.
func TestGitConfigPaths(t *testing.T) {
	for text, want := range map[string][]string{
		"[core]\n\thooksPath = h\n":                      {"h"},
		"[CORE]\nHOOKSPATH=\"q h\" # c\n":                {"q h"},
		"[include]\npath = a\n[includeIf \"x\"]\npath=b": {"+a", "+b"},
		"[core] hooksPath = inline\n":                    {"inline"},
		"[core]\nhooksPath =\n[other]\npath = x\n":       nil,
		"[core\nhooksPath = x\n":                         nil,
		"[core]\nhooksPath = \"a;b\"#c\n":                {"a;b"},
		"[core]\nhooksPath = a\\\"b  c\t \n":             {"a\"b  c"},
		"[core]\nhooksPath = ;\n":                        nil,
		"hooksPath = x\n[include]\n; path = y\n":         nil,
	} {
		var got []string
		for _, p := range gitConfigPaths(text) {
			if p.include {
				p.value = "+" + p.value
			}
			got = append(got, p.value)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
}

// FuzzGitConfigPaths: any text parses, to values git could name.
func FuzzGitConfigPaths(f *testing.F) {
	for _, s := range []string{"[core]\n\thooksPath = h\n", "[include]\npath = a\n", "[includeIf \"gitdir:/x/\"]\npath=\"b\"", "[", "]", "=\n", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, p := range gitConfigPaths(text) {
			if p.value == "" {
				t.Fatalf("%q: value %q", text, p.value)
			}
		}
	})
}
