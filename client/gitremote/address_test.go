package gitremote

import (
	"strings"
	"testing"
)

var goodAddresses = []struct {
	addr string
	want Repo
}{
	{"/git/github.com/alice/app", Repo{"github.com", "alice/app"}},
	{"/git/github.com/alice/app.git", Repo{"github.com", "alice/app.git"}},
	{"/git/github.com/alice/app/", Repo{"github.com", "alice/app"}},
	{"/git/git.example.com:8443/group/sub/repo.git", Repo{"git.example.com:8443", "group/sub/repo.git"}},
	{"/git/10.0.0.7/r", Repo{"10.0.0.7", "r"}},
	{"/git/github.com/a-b/c_d.e~f+g", Repo{"github.com", "a-b/c_d.e~f+g"}},
}

// hostileAddresses are what a hostile remote URL (a repository's
// .gitmodules, a crafted config, an agent) could put after coily::.
var hostileAddresses = []struct{ addr, why string }{
	{"", "not a path"},
	{"https://evil.example/alice/app", "not a path"},
	{"http://127.0.0.1:9/git/github.com/a/b", "not a path"},
	{"//evil.example/git/github.com/a/b", "not under /git/"},
	{"/git/github.com/a/b::https://evil.example/", `a second "::"`},
	{"coily::/git/github.com/a/b", `a second "::"`},
	{"/git/github.com/../evil.example/a", `".."`},
	{"/git/github.com/alice/../../x", `".."`},
	{"/git/github.com/alice/./app", `"."`},
	{"/git/../github.com/a/b", "host"},
	{"/git/github.com/alice%2f..%2fx/app", `"%"`},
	{"/git/github.com%2fevil.example/a/b", "host"},
	{"/git/github.com/alice/%2e%2e", `"%"`},
	{"/git/github.com/alice\\..\\x/app", `"\\"`},
	{"/git/github.com//alice/app", "empty path segment"},
	{"/git/github.com/alice//app", "empty path segment"},
	{"/git/github.com", "no repository path"},
	{"/git/github.com/", "no repository path"},
	{"/git/", "host"},
	{"/git//alice/app", "host"},
	{"/git/user@github.com/alice/app", "host"},
	{"/git/user:pw@github.com/alice/app", "host"},
	{"/git/github.com:0/a/b", "bad port"},
	{"/git/github.com:65536/a/b", "bad port"},
	{"/git/github.com:08/a/b", "bad port"},
	{"/git/github.com:/a/b", "bad port"},
	{"/git/GitHub.com/a/b", "lower case"},
	{"/git/-github.com/a/b", "host"},
	{"/git/github..com/a/b", "host"},
	{"/git/[::1]:22/a/b", `a second "::"`},
	{"/git/[fe80:1]/a/b", "host"},
	{"/git/github.com/a/b?service=git-receive-pack", `"?"`},
	{"/git/github.com/a/b#frag", `"#"`},
	{"/git/github.com/a/b c", "byte 0x20"},
	{"/git/github.com/a/b\n", "byte 0x0a"},
	{"/git/github.com/a/b\x00", "byte 0x00"},
	{"/git/github.com/a/\u202egnp", "byte 0xe2"},
	{"/git/github.com/a:b/c", `":"`},
	{"/git/github.com/a/info/refs;x", `";"`},
	{"/git/github.com/" + strings.Repeat("a", 256) + "/b", "longer than 255"},
	{"/git/github.com/" + strings.Repeat("a/", 600), "longer than 1024"},
}

func TestParseAddress(t *testing.T) {
	for _, tc := range goodAddresses {
		got, err := ParseAddress(tc.addr)
		if err != nil || got != tc.want {
			t.Errorf("ParseAddress(%q) = %+v, %v; want %+v", tc.addr, got, err, tc.want)
		}
		if err == nil && got.ProxyPath() != "/git/"+tc.want.Host+"/"+tc.want.Path {
			t.Errorf("ProxyPath of %q = %q", tc.addr, got.ProxyPath())
		}
	}
	for _, tc := range hostileAddresses {
		got, err := ParseAddress(tc.addr)
		if err == nil {
			t.Errorf("ParseAddress(%q) = %+v, want refused (%s)", tc.addr, got, tc.why)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseAddress(%q): %v; want it to say %s", tc.addr, err, tc.why)
		}
	}
}

// FuzzParseAddress: whatever the address, an accepted one names one
// repository on the proxy and nothing else: its path is /git/HOST/PATH
// with no segment that a URL parser or a file system reads as a
// separator, a dot segment, an escape, a query or another authority.
func FuzzParseAddress(f *testing.F) {
	for _, tc := range goodAddresses {
		f.Add(tc.addr)
	}
	for _, tc := range hostileAddresses {
		f.Add(tc.addr)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		r, err := ParseAddress(addr)
		if err != nil {
			return
		}
		p := r.ProxyPath()
		if len(p) > maxAddress || !strings.HasPrefix(addr, p) || strings.TrimSuffix(addr, "/") != p {
			t.Fatalf("%q: accepted as %q", addr, p)
		}
		for _, bad := range []string{"//", "/./", "/../", "%", "?", "#", "\\", "@", "::"} {
			if strings.Contains(p+"/", bad) {
				t.Fatalf("%q: accepted %q holds %q", addr, p, bad)
			}
		}
		if strings.ContainsFunc(r.Host, func(c rune) bool { return c == '/' || c >= 'A' && c <= 'Z' }) || r.Path == "" {
			t.Fatalf("%q: host %q path %q", addr, r.Host, r.Path)
		}
		if again, err := ParseAddress(p); err != nil || again != r {
			t.Fatalf("%q: its own path %q reads back as %+v, %v", addr, p, again, err)
		}
	})
}
