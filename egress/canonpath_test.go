package egress

import (
	"net/url"
	"strings"
	"testing"
)

// hostilePaths are request paths that another hop could read as a path
// outside the one checked: dot segments (literal, encoded, any case,
// with a ;param), encoded / \ NUL, backslashes, empty inner segments,
// invalid escapes.
var hostilePaths = []string{
	"/repos/../user", "/repos/./x", "/repos/%2e%2e/user", "/repos/%2E%2E/user", "/repos/.%2e/user", "/repos/%2e./user",
	"/repos/%2e/x", "/repos/alice/%2e%2e/%2e%2e/user", "/repos/org%2f..%2f..%2fuser", "/repos/org%2F..%2F..%2Fuser",
	"/repos/a%5c..%5cuser", "/repos/a\\..\\user", "/repos/a%00", "/repos//user", "//user", "/repos/%", "/repos/%2",
	"/repos/%zz", "/repos/..;/user", "/repos/..;x/user", "/repos/a/..", "/..", "/.", "/repos/%252e%252e/user/../x",
	"repos/x", "", "/repos/a b", "/repos/\x7f", "/repos/\xc3\xa9",
}

func TestCanonPathRefusesHostile(t *testing.T) {
	for _, p := range hostilePaths {
		if c, err := canonPath(p); err == nil {
			t.Errorf("canonPath(%q) = %q, want an error", p, c)
		}
	}
}

func TestCanonPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/repos/", "/repos/"},
		{"/repos/alice/app", "/repos/alice/app"},
		{"/repo%73/alice", "/repos/alice"},           // unreserved decoded
		{"/repos/%7Ealice%2d%5F", "/repos/~alice-_"}, // any case
		{"/repos/a%3ab", "/repos/a%3Ab"},             // reserved stays encoded, hex upper-cased
		{"/repos/a%252e%252e", "/repos/a%252e%252e"},
		{"/repos/..a/.b/c..", "/repos/..a/.b/c.."},
		{"/search/a;b", "/search/a;b"},
		{"/a\"b[c]{d}", "/a%22b%5Bc%5D%7Bd%7D"},
	} {
		got, err := canonPath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("canonPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestHTTPRuleMatchHostile: the l7 table's ** and * rules, with requests
// as they come (canonPath first, as outgoing does).
func TestHTTPRuleMatchHostile(t *testing.T) {
	rules := []HTTPRule{mustRule(t, "GET /repos/alice/**"), mustRule(t, "GET /repos/*")}
	for _, p := range append(hostilePaths, "/repos/alice/%2e%2e/%2e%2e/user", "/repos/org%2f..%2f..%2fuser", "/repos/alice/..%2f..%2fuser") {
		if c, err := canonPath(p); err == nil && anyAllows(rules, "GET", c) {
			t.Errorf("%q (as %q) is allowed", p, c)
		}
	}
	for _, p := range []string{"/repos/alice/app/x", "/repos/org", "/repos/alice/%41pp"} {
		if c, err := canonPath(p); err != nil || !anyAllows(rules, "GET", c) {
			t.Errorf("%q (as %q, %v) is refused", p, c, err)
		}
	}
}

// removeDotSegments is RFC 3986 §5.2.4.
func removeDotSegments(in string) string {
	var out []string
	segs := strings.Split(in, "/")
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}

// FuzzCanonPath: a path accepted under a prefix still has the prefix
// after remove_dot_segments of its decoded form, and what is forwarded
// is what was checked.
func FuzzCanonPath(f *testing.F) {
	for _, p := range hostilePaths {
		f.Add(p)
	}
	f.Add("/repos/alice/app")
	f.Add("/repo%73/x")
	f.Fuzz(func(t *testing.T, p string) {
		c, err := canonPath(p)
		if err != nil {
			return
		}
		if again, err := canonPath(c); err != nil || again != c {
			t.Fatalf("canonPath(%q) = %q, not a fixed point: %q %v", p, c, again, err)
		}
		dec, err := url.PathUnescape(c)
		if err != nil {
			t.Fatalf("%q accepted as %q, which does not decode: %v", p, c, err)
		}
		for _, prefix := range []string{"/repos/", "/repos", "/a/b/"} {
			if pathHasPrefix(c, prefix) && !pathHasPrefix(removeDotSegments(dec), prefix) {
				t.Fatalf("%q accepted under %q as %q; decoded and normalised it is %q", p, prefix, c, removeDotSegments(dec))
			}
		}
		u, err := url.Parse("https://h" + c)
		if err != nil || u.EscapedPath() != c {
			t.Fatalf("%q: forwarded as %q (%v), checked as %q", p, u.EscapedPath(), err, c)
		}
	})
}
