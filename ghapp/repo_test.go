package ghapp

import (
	"strings"
	"testing"
)

func TestParseRepository(t *testing.T) {
	const host = "ghe.example.com:8443"
	good := map[string]Repository{
		"alice/repo":                      {"alice", "repo"},
		"a/b":                             {"a", "b"},
		"Alice-1/my.repo_x-y":             {"Alice-1", "my.repo_x-y"},
		"ghe.example.com:8443/alice/repo": {"alice", "repo"},
		"GHE.example.com:8443/alice/repo": {"alice", "repo"},
		strings.Repeat("a", 39) + "/" + strings.Repeat("b", 100): {strings.Repeat("a", 39), strings.Repeat("b", 100)},
		"alice/.github": {"alice", ".github"},
		"alice/...":     {"alice", "..."},
	}
	for s, want := range good {
		got, err := ParseRepository(s, host)
		if err != nil || got != want {
			t.Errorf("ParseRepository(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{
		"", "/", "alice", "alice/", "/repo", "alice//repo", "alice/repo/", "alice/repo/x",
		"github.com/alice/repo",                 // another host
		"ghe.example.com/alice/repo",            // the host without its port
		"ghe.example.com:8443/alice/repo/extra", // more parts
		"https://ghe.example.com:8443/alice/repo", "git@ghe.example.com:alice/repo.git",
		"ghe.example.com:8443//alice/repo",
		"-alice/repo", "alice-/repo", "al--ice/repo", "al_ice/repo", "al.ice/repo", "al ice/repo",
		"alice/re po", "alice/re:po", "alice/..", "alice/.", "alice/re\x00po", "alice/r\u00e9po", "alic\u0435/repo",
		strings.Repeat("a", 40) + "/repo", "alice/" + strings.Repeat("b", 101),
		"alice/repo\n", " alice/repo", "alice/repo?x", "alice/repo#x", "alice/%2e%2e", "../alice/repo",
		"=alice/repo", "alice\\repo", strings.Repeat("a/", 5000),
	} {
		if got, err := ParseRepository(s, host); err == nil {
			t.Errorf("ParseRepository(%q) = %v, want an error", s, got)
		}
	}
	// Without a host, HOST/OWNER/NAME is refused.
	if got, err := ParseRepository("/alice/repo", ""); err == nil {
		t.Errorf("an empty host matched: %v", got)
	}
}

func FuzzParseRepository(f *testing.F) {
	for _, s := range []string{"alice/repo", "ghe.test:1/alice/repo", "a/../b", "-a/b", "a/b/c", "=a/b", "\xff/x"} {
		f.Add(s, "ghe.test:1")
	}
	f.Fuzz(func(t *testing.T, s, host string) {
		r, err := ParseRepository(s, host)
		if err != nil {
			return
		}
		if checkOwner(r.Owner) != nil || checkName(r.Name) != nil {
			t.Fatalf("%q gave %q", s, r)
		}
		if s != r.String() && !strings.EqualFold(s, host+"/"+r.String()) {
			t.Fatalf("%q (host %q) read as %q", s, host, r)
		}
		again, err := ParseRepository(r.String(), "")
		if err != nil || again != r {
			t.Fatalf("%q does not read back: %v %v", r, again, err)
		}
	})
}

func TestParseAPIURL(t *testing.T) {
	for s, want := range map[string][2]string{
		"https://api.github.com":               {"https://api.github.com", "github.com"},
		"https://api.github.com/":              {"https://api.github.com", "github.com"},
		"https://ghe.example.com/api/v3":       {"https://ghe.example.com/api/v3", "ghe.example.com"},
		"https://GHE.example.com:8443/api/v3/": {"https://ghe.example.com:8443/api/v3", "ghe.example.com:8443"},
		"https://ghe.example.com:443/api/v3":   {"https://ghe.example.com/api/v3", "ghe.example.com"},
		"https://api.acme.ghe.com":             {"https://api.acme.ghe.com", "acme.ghe.com"},
		"https://127.0.0.1:4443/api/v3":        {"https://127.0.0.1:4443/api/v3", "127.0.0.1:4443"},
	} {
		u, err := ParseAPIURL(s)
		if err != nil || u.String() != want[0] || WebHost(u) != want[1] {
			t.Errorf("ParseAPIURL(%q) = %v (web host %q), %v; want %v", s, u, WebHost(u), err, want)
		}
	}
	for _, s := range []string{
		"", "api.github.com", "http://api.github.com", "ftp://api.github.com", "https://", "https:///api/v3",
		"https://user:pw@api.github.com", "https://api.github.com?x=1", "https://api.github.com/#f",
		"https://api.github.com/a/../b", "https://api.github.com//x", "https://api.github.com:0",
		"https://api.github.com:99999", "https://api.github.com:x", "https://api.github.com/%2e%2e",
		"https://api.github.com?", "https:api.github.com", "https://api.github.com:080",
	} {
		if u, err := ParseAPIURL(s); err == nil {
			t.Errorf("ParseAPIURL(%q) = %v, want an error", s, u)
		}
	}
}
