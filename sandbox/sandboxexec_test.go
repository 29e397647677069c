package sandbox

import (
	"context"
	"errors"
	"flag"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update-sb", false, "rewrite testdata/sandboxexec/*.sb from SandboxExecProfile")

// sandboxExecCases are the golden profiles, by file name.
func sandboxExecCases() map[string]Profile {
	const (
		ws    = "/Users/dev/src/app"
		state = "/Users/dev/Library/Application Support/coily"
		home  = state + "/homes/h1"
	)
	return map[string]Profile{
		"minimal-deny": {
			Env:  []string{"PATH=/usr/bin:/bin"},
			Dir:  "/Users/dev/ws",
			Home: "/Users/dev/ws",
		},
		"workspace": {
			Dir:        ws,
			Home:       home,
			ReadPaths:  []string{"/opt/sdk", "/Users/dev/go/pkg/mod"},
			WritePaths: []string{ws, "/private/var/folders/xy/abc/T/coily-cache"},
			ProtectPaths: []string{
				ws + "/.git/hooks", ws + "/.git/config", ws + "/.envrc", home + "/.zshrc",
			},
			DenyPaths: []string{"/Users/dev/.ssh", "/Users/dev/.aws", "/etc/ssh", "/etc/sudoers", state},
			Files:     map[string]string{"/etc/resolv.conf": "/private/var/run/resolv.conf"},
			Network:   NetworkDeny,
		},
		"loopback": {
			Dir:        ws,
			Home:       "/tmp/coily-home",
			WritePaths: []string{ws},
			DenyPaths:  []string{"/Users/dev/.ssh"},
			Network:    NetworkLoopback,
		},
		"proxied": {
			Dir:        ws,
			Home:       home,
			WritePaths: []string{ws},
			DenyPaths:  []string{"/Users/dev/.ssh", state},
			Network:    NetworkProxied,
			ProxyAddr:  "127.0.0.1:54321",
			// Not granted: sandbox-exec reaches the proxy over TCP only.
			ProxySocket: state + "/run/proxy.sock",
		},
		"proxied-ipv6-unix-sockets": {
			Dir:         ws,
			Home:        home,
			WritePaths:  []string{ws},
			DenyPaths:   []string{"/Users/dev/.ssh", state},
			Network:     NetworkProxied,
			ProxyAddr:   "[::1]:3128",
			UnixSockets: []string{"/var/run/docker.sock"},
		},
		"open-unix-sockets": {
			Dir:         ws,
			Home:        home,
			WritePaths:  []string{ws},
			DenyPaths:   []string{"/Users/dev/.ssh", state},
			Network:     NetworkOpen,
			UnixSockets: []string{"/var/run/docker.sock", "/tmp/ssh-agent.sock"},
		},
	}
}

func TestSandboxExecGolden(t *testing.T) {
	for name, p := range sandboxExecCases() {
		t.Run(name, func(t *testing.T) {
			got, err := SandboxExecProfile(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseSBPL(got); err != nil {
				t.Fatalf("profile does not parse: %v\n%s", err, got)
			}
			path := filepath.Join("testdata", "sandboxexec", name+".sb")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run SandboxExecGolden -update-sb ./sandbox)", err)
			}
			if got != string(want) {
				t.Errorf("profile differs from %s (run with -update-sb to accept):\n%s", path, got)
			}
		})
	}
}

func TestSandboxExecDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for name, p := range sandboxExecCases() {
		first, err := SandboxExecProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := SandboxExecProfile(p); again != first {
			t.Fatalf("%s: two renderings differ", name)
		}
		for range 20 {
			q := p
			for _, s := range []*[]string{&q.ReadPaths, &q.WritePaths, &q.ProtectPaths, &q.DenyPaths, &q.UnixSockets} {
				c := slices.Clone(*s)
				rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
				if len(c) > 0 && rng.Intn(2) == 0 {
					c = append(c, c[rng.Intn(len(c))]) // duplicates change nothing
				}
				*s = c
			}
			q.Files = map[string]string{}
			for k, v := range p.Files {
				q.Files[k] = v
			}
			got, err := SandboxExecProfile(q)
			if err != nil {
				t.Fatal(err)
			}
			if got != first {
				t.Fatalf("%s: shuffled input renders differently:\n%s\nwant\n%s", name, got, first)
			}
		}
	}
}

func TestSandboxExecEscapes(t *testing.T) {
	odd := `/Users/dev/odd"dir\x`
	inject := `/Users/dev/a")) (allow default) (allow file-write* (subpath "/x`
	p := Profile{Dir: "/Users/dev", Home: "/Users/dev/h", ReadPaths: []string{odd, inject}}
	got, err := SandboxExecProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `(allow file-read* (subpath "/Users/dev/odd\"dir\\x"))`; !strings.Contains(got, want) {
		t.Errorf("profile lacks %s:\n%s", want, got)
	}
	forms, err := parseSBPL(got)
	if err != nil {
		t.Fatalf("profile does not parse: %v\n%s", err, got)
	}
	for _, f := range forms {
		if f == "(allow default)" || f == `(allow file-write* (subpath "/x"))` {
			t.Fatalf("a path wrote its own rule %s:\n%s", f, got)
		}
	}
	if sbplQuote(`a"b\c`) != `"a\"b\\c"` {
		t.Errorf("sbplQuote = %s", sbplQuote(`a"b\c`))
	}
}

func TestSandboxExecRejects(t *testing.T) {
	base := func() Profile {
		return Profile{Dir: "/Users/dev/ws", Home: "/Users/dev/h", Network: NetworkDeny}
	}
	for name, mutate := range map[string]func(*Profile){
		"nul read":        func(p *Profile) { p.ReadPaths = []string{"/a\x00b"} },
		"newline write":   func(p *Profile) { p.WritePaths = []string{"/a\nb"} },
		"cr deny":         func(p *Profile) { p.DenyPaths = []string{"/a\rb"} },
		"newline protect": func(p *Profile) { p.ProtectPaths = []string{"/a\n(allow default)"} },
		"nul home":        func(p *Profile) { p.Home = "/h\x00" },
		"newline dir":     func(p *Profile) { p.Dir = "/d\n" },
		"newline socket":  func(p *Profile) { p.UnixSockets = []string{"/s\n.sock"} },
		"nul file src":    func(p *Profile) { p.Files = map[string]string{"/etc/x": "/x\x00"} },
		"newline file dst": func(p *Profile) {
			p.Files = map[string]string{"/etc/x\n": "/x"}
		},
		"newline proxy": func(p *Profile) { p.Network, p.ProxySocket = NetworkProxied, "/p\n.sock" },
		"relative read": func(p *Profile) { p.ReadPaths = []string{"rel"} },
		"unclean write": func(p *Profile) { p.WritePaths = []string{"/a/../b"} },
		"proxied no socket": func(p *Profile) {
			p.Network = NetworkProxied
		},
		"proxied socket only": func(p *Profile) {
			p.Network, p.ProxySocket = NetworkProxied, "/Users/dev/proxy.sock"
		},
		"relative proxy":  func(p *Profile) { p.Network, p.ProxySocket = NetworkProxied, "proxy.sock" },
		"unknown network": func(p *Profile) { p.Network = "wifi" },
	} {
		p := base()
		mutate(&p)
		if got, err := SandboxExecProfile(p); err == nil {
			t.Errorf("%s: accepted:\n%s", name, got)
		}
	}
	if _, err := SandboxExecProfile(base()); err != nil {
		t.Fatalf("base profile refused: %v", err)
	}
}

// TestSandboxExecOrder checks that Seatbelt's last-match-wins makes the
// restrictive rules win: every allow comes before every protect and deny
// rule, and every deny rule for a DenyPath comes after every allow.
func TestSandboxExecOrder(t *testing.T) {
	for name, p := range sandboxExecCases() {
		got, err := SandboxExecProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		forms, err := parseSBPL(got)
		if err != nil {
			t.Fatal(err)
		}
		lastAllow := -1
		for i, f := range forms {
			if strings.HasPrefix(f, "(allow") {
				lastAllow = i
			}
		}
		for _, d := range p.DenyPaths {
			at := slices.IndexFunc(forms, func(f string) bool {
				return strings.HasPrefix(f, "(deny file-read* file-write*") && strings.Contains(f, sbplQuote(sbplCanonical(d)))
			})
			if at < 0 {
				t.Errorf("%s: no deny rule for %s:\n%s", name, d, got)
			} else if at < lastAllow {
				t.Errorf("%s: deny rule for %s (form %d) precedes an allow (form %d):\n%s", name, d, at, lastAllow, got)
			}
		}
		for _, pp := range p.ProtectPaths {
			at := slices.IndexFunc(forms, func(f string) bool {
				return strings.HasPrefix(f, "(deny file-write*") && strings.Contains(f, sbplQuote(sbplCanonical(pp)))
			})
			if at < lastAllow {
				t.Errorf("%s: protect rule for %s at %d, last allow at %d", name, pp, at, lastAllow)
			}
		}
	}
}

func TestSandboxExecNetworkModes(t *testing.T) {
	cases := sandboxExecCases()
	networkAllows := func(name string) []string {
		got, err := SandboxExecProfile(cases[name])
		if err != nil {
			t.Fatal(err)
		}
		forms, err := parseSBPL(got)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range forms {
			if strings.HasPrefix(f, "(allow network") || strings.HasPrefix(f, "(allow system-socket") {
				out = append(out, f)
			}
		}
		return out
	}
	if got := networkAllows("minimal-deny"); len(got) != 0 {
		t.Errorf("deny: %q", got)
	}
	if got := networkAllows("workspace"); len(got) != 0 {
		t.Errorf("deny: %q", got)
	}
	if got, want := networkAllows("loopback"), []string{
		`(allow network-bind network-inbound (local ip "localhost:*"))`,
		`(allow network-outbound (remote ip "localhost:*"))`,
	}; !slices.Equal(got, want) {
		t.Errorf("loopback: %q, want %q", got, want)
	}
	if got, want := networkAllows("proxied"), []string{
		`(allow network-outbound (remote tcp "localhost:54321"))`,
	}; !slices.Equal(got, want) {
		t.Errorf("proxied: %q, want %q", got, want)
	}
	if got, want := networkAllows("proxied-ipv6-unix-sockets"), []string{
		`(allow network-outbound (remote tcp "localhost:3128"))`,
		`(allow system-socket (socket-domain AF_UNIX))`,
		`(allow network-outbound (remote unix-socket (path-literal "/private/var/run/docker.sock") (path-literal "/var/run/docker.sock")))`,
	}; !slices.Equal(got, want) {
		t.Errorf("proxied with unix sockets: %q, want %q", got, want)
	}
	if got, want := networkAllows("open-unix-sockets"), []string{
		`(allow network*)`,
		`(allow system-socket)`,
		`(allow system-socket (socket-domain AF_UNIX))`,
		`(allow network-outbound (remote unix-socket (path-literal "/private/tmp/ssh-agent.sock") (path-literal "/tmp/ssh-agent.sock")))`,
		`(allow network-outbound (remote unix-socket (path-literal "/private/var/run/docker.sock") (path-literal "/var/run/docker.sock")))`,
	}; !slices.Equal(got, want) {
		t.Errorf("open: %q, want %q", got, want)
	}
}

// TestSandboxExecDeeperWins checks that, as with bubblewrap's mounts, a
// granted path nested in a denied or protected one stays granted, and that
// the writable parents of protected and denied paths cannot be moved.
func TestSandboxExecDeeperWins(t *testing.T) {
	p := Profile{
		Dir: "/s/w", Home: "/s/h",
		ReadPaths:    []string{"/s/r"},
		WritePaths:   []string{"/s/w", "/p/w"},
		ProtectPaths: []string{"/p", "/s/w/.git/hooks"},
		DenyPaths:    []string{"/s", "/s/w/secret"},
		Files:        map[string]string{"/etc/f": "/s/f"},
	}
	got, err := SandboxExecProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	forms, err := parseSBPL(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(deny file-write* (require-all (subpath "/p") (require-not (subpath "/p/w"))))`,
		`(deny file-write* (subpath "/s/w/.git/hooks"))`,
		`(deny file-write-unlink (literal "/s/w") (literal "/s/w/.git"))`,
		`(deny file-read* file-write* process-exec (require-all (subpath "/s") (require-not (literal "/s/f")) (require-not (subpath "/s/h")) (require-not (subpath "/s/r")) (require-not (subpath "/s/w"))))`,
		`(deny file-read* file-write* process-exec (subpath "/s/w/secret"))`,
	} {
		if !slices.Contains(forms, want) {
			t.Errorf("profile lacks %s:\n%s", want, got)
		}
	}
}

func TestSandboxExecCanonicalPaths(t *testing.T) {
	for in, want := range map[string][]string{
		"/tmp":               {"/private/tmp", "/tmp"},
		"/tmp/x":             {"/private/tmp/x", "/tmp/x"},
		"/private/var/x":     {"/private/var/x", "/var/x"},
		"/etc/ssh":           {"/private/etc/ssh", "/etc/ssh"},
		"/tmpfoo":            {"/tmpfoo"},
		"/private/tmpfoo":    {"/private/tmpfoo"},
		"/Users/dev/tmp/etc": {"/Users/dev/tmp/etc"},
	} {
		if got := sbplPathForms(in); !slices.Equal(got, want) {
			t.Errorf("forms(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestSandboxExecWrap(t *testing.T) {
	s := SandboxExec{}
	if s.Name() != "sandbox-exec" || !s.Confined() {
		t.Fatalf("name %q confined %v", s.Name(), s.Confined())
	}
	var _ Sandbox = s
	p := sandboxExecCases()["workspace"]
	cmd := exec.Command("/bin/echo", "hello", "world")
	conf, err := s.Wrap(context.Background(), cmd, p)
	if runtime.GOOS != "darwin" {
		if !errors.Is(err, ErrUnavailable) || conf != nil {
			t.Fatalf("Wrap on %s = %v, %v; want ErrUnavailable", runtime.GOOS, conf, err)
		}
		if cmd.Path != "/bin/echo" {
			t.Fatalf("Wrap changed the command: %v", cmd.Args)
		}
		return
	}
	if _, statErr := os.Stat(SandboxExecPath); statErr != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Wrap without %s = %v", SandboxExecPath, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	profile, _ := SandboxExecProfile(p)
	want := []string{SandboxExecPath, "-p", profile, "--", "/bin/echo", "hello", "world"}
	if cmd.Path != SandboxExecPath || !slices.Equal(cmd.Args, want) || cmd.Dir != p.Dir || !slices.Equal(cmd.Env, p.Env) {
		t.Fatalf("cmd %q %q dir %q", cmd.Path, cmd.Args, cmd.Dir)
	}
}

// parseSBPL splits an SBPL profile into its top-level forms, checking that
// parentheses balance and strings close. Comments are dropped; whitespace
// inside a form is kept as written, with newlines and indentation folded
// into single spaces.
func parseSBPL(profile string) ([]string, error) {
	var forms []string
	var cur strings.Builder
	depth, inString, escaped, inComment := 0, false, false, false
	for i := 0; i < len(profile); i++ {
		c := profile[i]
		switch {
		case inComment:
			if c == '\n' {
				inComment = false
			}
			continue
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			case c == '\n':
				return nil, errors.New("newline inside a string")
			}
		case c == ';':
			inComment = true
			continue
		case c == '"':
			if depth == 0 {
				return nil, errors.New("string outside a form")
			}
			inString = true
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, errors.New("unbalanced )")
			}
			if depth == 0 {
				cur.WriteByte(c)
				forms = append(forms, strings.Join(strings.Fields(cur.String()), " "))
				cur.Reset()
				continue
			}
		case depth == 0:
			if c != ' ' && c != '\n' && c != '\t' {
				return nil, errors.New("text outside a form")
			}
			continue
		}
		cur.WriteByte(c)
	}
	if depth != 0 || inString {
		return nil, errors.New("unclosed form or string")
	}
	return forms, nil
}
