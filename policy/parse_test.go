package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/internal/hostileyaml"
	"coily.dev/coily/internal/policytest"
	"coily.dev/coily/policy"
	"coily.dev/coily/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/broken")

// examples lists the example policies shipped in ../examples.
func examples(t testing.TB) []string {
	return policytest.YAMLFiles(t, "../examples")
}

func TestLoadValid(t *testing.T) {
	files := append(policytest.YAMLFiles(t, "testdata/valid"), examples(t)...)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			p, err := policy.Load(file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if p.Path != file {
				t.Errorf("Path = %q, want %q", p.Path, file)
			}
			if len(p.SHA256) != 64 {
				t.Errorf("SHA256 = %q, want 64 hex digits", p.SHA256)
			}
			checkRules(t, p)
		})
	}
}

// checkRules asserts what every loaded policy's rules guarantee.
func checkRules(t testing.TB, p *policy.Policy) {
	t.Helper()
	checkNotify(t, p)
	seen := map[string]bool{}
	if c := p.Concurrency(); c < 1 || c > 1024 {
		t.Errorf("Concurrency() = %d", c)
	}
	if pp := p.PerPrincipal(); pp < 1 || pp > p.Concurrency() {
		t.Errorf("PerPrincipal() = %d with Concurrency() %d", pp, p.Concurrency())
	}
	for _, r := range p.Rules() {
		if r.PerPrincipal < 0 || r.PerPrincipal > p.PerPrincipal() || r.Concurrency > 0 && r.PerPrincipal > r.Concurrency {
			t.Errorf("rule %q: per_principal %d (concurrency %d, limits.per_principal %d)", r.Name, r.PerPrincipal, r.Concurrency, p.PerPrincipal())
		}
		if seen[r.Name] {
			t.Errorf("rule %q appears twice", r.Name)
		}
		seen[r.Name] = true
		if !filepath.IsAbs(r.Binary) || filepath.Clean(r.Binary) != r.Binary {
			t.Errorf("rule %q: binary %q is not a clean absolute path", r.Name, r.Binary)
		}
		if (r.Resolved == "") == (r.Absent == nil) {
			t.Errorf("rule %q: Resolved %q with Absent %v", r.Name, r.Resolved, r.Absent)
		}
		if r.Resolved != "" && !filepath.IsAbs(r.Resolved) {
			t.Errorf("rule %q: Resolved %q is not absolute", r.Name, r.Resolved)
		}
		if r.Line <= 0 {
			t.Errorf("rule %q: line %d", r.Name, r.Line)
		}
		if err := r.Args.Validate(); err != nil {
			t.Errorf("rule %q: invalid args: %v", r.Name, err)
		}
		switch r.Effect {
		case policy.Deny:
			if r.Env != nil || r.Workspace != "" || r.Sandbox != "" || r.Timeout != 0 || r.MaxOutput != 0 ||
				r.Confirm || r.ConfirmTimeout != 0 || r.Rate != nil || r.Concurrency != 0 || r.PerPrincipal != 0 || r.Args.Flags != nil || r.Args.AnyFlags || r.Egress != nil ||
				gitcredentials.Of(r) != nil || sshkeys.Of(r) != nil || r.CAFile != "" || githubapp.Of(r) != nil {
				t.Errorf("deny rule %q has allow settings: %+v", r.Name, *r)
			}
			continue
		case policy.Allow:
		default:
			t.Errorf("rule %q: effect %d", r.Name, r.Effect)
		}
		if r.Report || r.Reason != "" {
			t.Errorf("allow rule %q has deny settings: %+v", r.Name, *r)
		}
		checkGitCredentials(t, r)
		checkSSHKeys(t, r)
		checkGitHubApp(t, r)
		if r.Timeout <= 0 || r.Timeout > policy.MaxTimeout {
			t.Errorf("rule %q: timeout %v out of (0, %v]", r.Name, r.Timeout, policy.MaxTimeout)
		}
		if r.MaxOutput <= 0 {
			t.Errorf("rule %q: max output %d is not positive", r.Name, r.MaxOutput)
		}
		if !slices.Contains([]string{policy.SandboxNative, policy.SandboxBwrap, policy.SandboxSandboxExec}, r.Sandbox) {
			t.Errorf("rule %q: unknown sandbox %q", r.Name, r.Sandbox)
		}
		if _, named := p.Workspace(r.Workspace); r.Workspace != policy.WorkspaceTemp && !named {
			t.Errorf("rule %q: unknown workspace %q", r.Name, r.Workspace)
		}
		if r.ConfirmTimeout <= 0 || r.ConfirmTimeout > policy.MaxTimeout {
			t.Errorf("rule %q: confirm timeout %v", r.Name, r.ConfirmTimeout)
		}
		if r.Rate != nil && (r.Rate.PerMinute < 1 || r.Rate.Burst < 1) {
			t.Errorf("rule %q: rate %+v", r.Name, *r.Rate)
		}
		if r.Concurrency < 0 || r.Concurrency > 1024 {
			t.Errorf("rule %q: concurrency %d", r.Name, r.Concurrency)
		}
		checkEgress(t, r)
	}
}

func TestExampleMatchesTestdata(t *testing.T) {
	example, err := os.ReadFile("../examples/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile("testdata/valid/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(example) != string(copied) {
		t.Errorf("testdata/valid/local.yaml differs from examples/local.yaml; copy it again")
	}
}

// sameRule compares two rules field by field; Absent is compared by
// whether it is set.
func sameRule(t testing.TB, got, want *policy.Rule) {
	t.Helper()
	g, w := *got, *want
	if (g.Absent == nil) != (w.Absent == nil) {
		t.Errorf("rule %q: Absent = %v, want %v", w.Name, g.Absent, w.Absent)
	}
	if !policy.Checked(&g.Args) {
		t.Errorf("rule %q: its argument spec was not validated at load (matching would write to it concurrently)", w.Name)
	}
	g.Args = policy.Unchecked(g.Args)
	g.Absent, w.Absent = nil, nil
	if w.Candidates == nil {
		w.Candidates = []string{w.Binary} // one path written
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("rule %q:\n got %+v\nwant %+v", w.Name, g, w)
	}
}

func TestLoadFullRules(t *testing.T) {
	p, err := policy.Load("testdata/valid/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := p.Rules()
	sb := platformSandbox()
	absent := errors.New("absent")
	want := []policy.Rule{
		{Name: "echo-secret", Effect: policy.Deny, Binary: "/bin/echo", Resolved: resolve(t, "/bin/echo"),
			Args:   policy.ArgSpec{Args: []string{"secret", "**"}, IfFlags: []string{"--show", "-s"}},
			Reason: "no secrets", Line: 32},
		{Name: "echo-audit", Effect: policy.Deny, Binary: "/bin/echo", Resolved: resolve(t, "/bin/echo"), Report: true, Line: 38},
		{Name: "echo", Effect: policy.Allow, Binary: "/bin/echo", Resolved: resolve(t, "/bin/echo"),
			Args: policy.ArgSpec{Args: []string{"*", "**"}, Flags: map[string]policy.FlagSpec{
				"--repo":  {Values: []string{"alice/*"}},
				"--web":   {Bool: true},
				"--label": {Values: []string{"bug", "docs"}},
				"-n":      {Bool: true},
			}},
			Env: []string{"NO_COLOR", "GH_PROMPT_DISABLED"}, Workspace: "repo", Sandbox: policy.SandboxNative, Network: policy.NetworkDeny,
			Timeout: time.Nanosecond, MaxOutput: 1, Confirm: true, ConfirmTimeout: 30 * time.Second,
			Rate: &policy.RateLimit{PerMinute: 10, Burst: 3}, Concurrency: 2, Limits: sandbox.DefaultLimits, Line: 42},
		{Name: "ls", Effect: policy.Allow, Binary: "/usr/bin/ls", Resolved: resolve(t, "/usr/bin/ls"),
			Args:      policy.ArgSpec{Args: []string{"**"}, AnyFlags: true},
			Workspace: policy.WorkspaceTemp, Sandbox: policy.SandboxBwrap, Network: policy.NetworkDeny, Timeout: 24 * time.Hour, MaxOutput: 1 << 30,
			ConfirmTimeout: policy.DefaultConfirmTimeout, Rate: &policy.RateLimit{PerMinute: 60, Burst: 60}, Limits: sandbox.DefaultLimits, Line: 60},
		{Name: "ls.mac", Effect: policy.Allow, Binary: "/bin/ls", Resolved: resolve(t, "/bin/ls"),
			Workspace: "scratch.2", Sandbox: policy.SandboxSandboxExec, Network: policy.NetworkDeny, Timeout: 90 * time.Second, MaxOutput: 64 << 10,
			Confirm: true, ConfirmTimeout: policy.DefaultConfirmTimeout, Limits: sandbox.DefaultLimits, Line: 69},
		{Name: "defaults_0", Effect: policy.Allow, Binary: "/usr/bin/true", Resolved: resolve(t, "/usr/bin/true"),
			Workspace: policy.WorkspaceTemp, Sandbox: sb, Network: policy.NetworkDeny, Timeout: policy.DefaultTimeout, MaxOutput: policy.DefaultMaxOutput,
			ConfirmTimeout: policy.DefaultConfirmTimeout, Limits: sandbox.DefaultLimits, Line: 76},
		{Name: "pinned-wrong", Effect: policy.Allow, Binary: "/bin/true", Absent: absent,
			SHA256:    "0000000000000000000000000000000000000000000000000000000000000000",
			Workspace: policy.WorkspaceTemp, Sandbox: sb, Network: policy.NetworkDeny, Timeout: policy.DefaultTimeout, MaxOutput: policy.DefaultMaxOutput,
			ConfirmTimeout: policy.DefaultConfirmTimeout, Limits: sandbox.DefaultLimits, Line: 78},
		{Name: "absent", Effect: policy.Allow, Binary: "/nonexistent/coily-test/absent", Absent: absent,
			Workspace: policy.WorkspaceTemp, Sandbox: sb, Network: policy.NetworkDeny, Timeout: policy.DefaultTimeout, MaxOutput: policy.DefaultMaxOutput,
			ConfirmTimeout: policy.DefaultConfirmTimeout, Limits: sandbox.DefaultLimits, Line: 81},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rules, want %d", len(got), len(want))
	}
	for i := range want {
		sameRule(t, got[i], &want[i])
	}
	if err := got[6].Absent; !errors.Is(err, policy.ErrDigest) {
		t.Errorf("pinned-wrong: Absent = %v, want ErrDigest", err)
	}
	if err := got[7].Absent; errors.Is(err, policy.ErrDigest) || !strings.Contains(err.Error(), "is not on this host") {
		t.Errorf("absent: Absent = %v", err)
	}
	if sb, want := p.Sandboxes(), []string{"bwrap", "native", "sandbox-exec"}; !slices.Equal(sb, want) {
		t.Errorf("Sandboxes() = %q, want %q", sb, want)
	}
	if c := p.Concurrency(); c != 8 {
		t.Errorf("Concurrency() = %d, want 8", c)
	}
	for name, dir := range map[string]string{"repo": "/srv/work/repo", "scratch.2": "/var/tmp/coily"} {
		if got, ok := p.Workspace(name); !ok || got != dir {
			t.Errorf("Workspace(%q) = %q, %v; want %q", name, got, ok, dir)
		}
	}
	for _, name := range []string{"temp", "", "other"} {
		if got, ok := p.Workspace(name); ok {
			t.Errorf("Workspace(%q) = %q, want none", name, got)
		}
	}

	// Rules returns a copy: changing it does not change the policy.
	got[0] = nil
	if p.Rules()[0] == nil {
		t.Error("Rules() exposes the policy's own slice")
	}
}

// platformSandbox is the backend a rule gets when it names none.
func platformSandbox() string {
	p, err := policy.Parse("default.yaml", []byte("version: 1\ncommands:\n  - name: x\n    binary: /bin/x\n"))
	if err != nil {
		panic(err)
	}
	return p.Rules()[0].Sandbox
}

func TestDefaultSandboxIsNotNative(t *testing.T) {
	if sb := platformSandbox(); sb == policy.SandboxNative {
		t.Errorf("a rule naming no sandbox gets %q; native must be named explicitly", sb)
	}
}

func TestSHA256IdentifiesContent(t *testing.T) {
	a, err := policy.Parse("a.yaml", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Parse("b.yaml", []byte("version: 1 # changed\n"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("version: 1\n"))
	if want := hex.EncodeToString(sum[:]); a.SHA256 != want {
		t.Errorf("SHA256 = %s, want %s", a.SHA256, want)
	}
	if a.SHA256 == b.SHA256 {
		t.Errorf("different files share SHA256 %s", a.SHA256)
	}
}

// noLine lists the broken files whose error cannot point at a line.
var noLine = map[string]bool{
	"empty.yaml":        true,
	"comment-only.yaml": true,
	"non-utf8.yaml":     true,
}

// noColumn lists the broken files whose error names a line but no column:
// YAML syntax errors, found before there is a node to point at.
var noColumn = map[string]bool{
	"tab-indent.yaml": true,
}

func TestLoadBroken(t *testing.T) {
	policytest.Broken(t, "testdata/broken", *update, noLine, noColumn)
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := policy.Load(path)
	var e *policy.Error
	if !errors.As(err, &e) || e.File != path || !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("Load(missing) = %v, want a *policy.Error naming %s", err, path)
	}
}

func TestTooLarge(t *testing.T) {
	data := []byte("version: 1\n" + strings.Repeat("#", policy.MaxFileSize))
	want := "big.yaml: file larger than 4194304 bytes"
	if _, err := policy.Parse("big.yaml", data); err == nil || err.Error() != want {
		t.Errorf("Parse(too large) = %v, want %q", err, want)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(path); err == nil || err.Error() != path+": file larger than 4194304 bytes" {
		t.Errorf("Load(too large) = %v", err)
	}

	// Exactly MaxFileSize is fine.
	data = data[:policy.MaxFileSize]
	if _, err := policy.Parse("max.yaml", data); err != nil {
		t.Errorf("Parse(MaxFileSize bytes) = %v", err)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    policy.Error
		want string
	}{
		{policy.Error{File: "p.yaml", Line: 3, Column: 7, Msg: "bad"}, "p.yaml:3:7: bad"},
		{policy.Error{File: "p.yaml", Line: 3, Msg: "bad"}, "p.yaml:3: bad"},
		{policy.Error{File: "p.yaml", Msg: "bad"}, "p.yaml: bad"},
		{policy.Error{File: "p.yaml", Column: 7, Msg: "bad"}, "p.yaml: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	valid := []struct {
		in   string
		want int64
	}{
		{"1", 1},
		{"4096", 4096},
		{"4096B", 4096},
		{"64KiB", 64 << 10},
		{"4MiB", 4 << 20},
		{"1GiB", 1 << 30},
		{"1024GiB", 1 << 40},
		{"1099511627776", 1 << 40},
	}
	for _, tc := range valid {
		got, err := policy.ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	invalid := []string{
		"", "0", "-1", "1.5MiB", "1TB", "99999999999999GiB", " ",
		"0KiB", "-4MiB", "MiB", "1025GiB", "1099511627777", "1kib", "1 TiB",
		"9223372036854775807", "9223372036854775808", "0x10", "1e6", "4 MiB extra",
	}
	for _, in := range invalid {
		got, err := policy.ParseSize(in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
			continue
		}
		if got != 0 {
			t.Errorf("ParseSize(%q) returned %d with its error", in, got)
		}
		if !strings.Contains(err.Error(), "size ") {
			t.Errorf("ParseSize(%q) error %q does not name the size", in, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/valid", "testdata/broken", "../examples"} {
		for _, file := range policytest.YAMLFiles(f, dir) {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, c := range hostileyaml.Cases("version: 1\n", 2<<10, policy.MaxDepth, policy.MaxValues) {
		f.Add(c.Data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse("fuzz.yaml", data)
		if err != nil {
			var e *policy.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T (%v) is not a *policy.Error", err, err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %q does not start with the file name", err)
			}
			if p != nil {
				t.Fatalf("Parse returned a policy with error %v", err)
			}
			if _, again := policy.Parse("fuzz.yaml", data); again == nil || again.Error() != err.Error() {
				t.Fatalf("error changed between parses: %q then %v", err, again)
			}
			return
		}
		checkRules(t, p)
		for _, r := range p.Rules() {
			// The decision for a rule's own binary never panics and
			// allows only with a rule for that binary.
			s := policy.Subject{Principal: "tag:fuzz", Roles: []string{policy.OperatorRole}}
			for _, argv := range [][]string{{r.Binary}, {r.Binary, "-x", "--", "y"}} {
				d := p.DecideExec(s, policy.Request{Argv: argv})
				bin, err := filepath.EvalSymlinks(r.Binary)
				if d.Result == policy.Allow && (err != nil || d.Rule == nil || d.Rule.Absent != nil || d.Rule.Resolved != bin) {
					t.Fatalf("allowed %s with rule %+v", r.Binary, d.Rule)
				}
				// Deny rules speak for absent binaries too (by the path
				// as written); an absent allow rule never decides.
				if r.Absent != nil && d.Rule == r && r.Effect == policy.Allow {
					t.Fatalf("absent rule %q decided %q", r.Name, argv)
				}
			}
		}
	})
}
