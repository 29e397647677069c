package policy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

func load(t testing.TB, name string) *policy.Policy {
	t.Helper()
	p, err := policy.Load("testdata/valid/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Subjects of testdata/valid/decide.yaml.
var (
	localOperator = policy.Subject{Principal: "local:alice", Roles: []string{policy.OperatorRole}}
	tagAgent      = policy.Subject{Principal: "tag:agent"}
	admin         = policy.Subject{Principal: "bob@example.com"}
	watcher       = policy.Subject{Principal: "carol@example.com"}
	remoteOp      = policy.Subject{Principal: "erin@example.com"}
	stranger      = policy.Subject{Principal: "mallory@example.com"}
)

var allPerms = policy.AllPermissions

func TestPermissions(t *testing.T) {
	decide, noOp := load(t, "decide.yaml"), load(t, "no-operator-role.yaml")
	baseline := policy.OperatorBaseline
	for _, tc := range []struct {
		name      string
		p         *policy.Policy
		s         policy.Subject
		roles     []string
		perms     []policy.Permission
		commands  map[string]policy.Result // argv[0] → result
		denyMatch string                   // a substring of every deny reason
	}{
		{
			name:  "local operator, operator role defined",
			p:     decide,
			s:     localOperator,
			roles: []string{"operator"},
			// The policy's exec and status, plus the baseline.
			perms:    []policy.Permission{"exec", "lockout", "unlock", "pause", "resume", "status"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/true": policy.Deny, "/bin/sh": policy.Deny},
		},
		{
			name:     "local operator, operator role not defined",
			p:        noOp,
			s:        localOperator,
			roles:    []string{"operator"},
			perms:    baseline,
			commands: map[string]policy.Result{"/bin/echo": policy.Deny},
		},
		{
			name:     "local operator, minimal policy",
			p:        load(t, "minimal.yaml"),
			s:        localOperator,
			roles:    []string{"operator"},
			perms:    baseline,
			commands: map[string]policy.Result{"/bin/echo": policy.Deny},
		},
		{
			name:     "local operator, example policy",
			p:        load(t, "local.yaml"),
			s:        localOperator,
			roles:    []string{"operator"},
			perms:    []policy.Permission{"exec", "lockout", "unlock", "pause", "resume", "status", "approve"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/true": policy.Allow, "/bin/sleep": policy.Allow, "/bin/sh": policy.Allow, "/bin/ls": policy.Deny},
		},
		{
			// The built-in baseline is the local socket's alone: a grant of
			// the operator role gives what the policy's role lists.
			name:     "remote principal granted the operator role",
			p:        decide,
			s:        remoteOp,
			roles:    []string{"operator"},
			perms:    []policy.Permission{"exec", "status"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/sh": policy.Deny},
		},
		{
			name:  "a capability cannot confer the operator role",
			p:     decide,
			s:     policy.Subject{Principal: "tag:owner", CapRoles: []string{"operator"}},
			roles: []string{"agent"},
			perms: []policy.Permission{"exec", "status"},
		},
		{
			name:  "a capability cannot confer unlock",
			p:     load(t, "unlock.yaml"),
			s:     policy.Subject{Principal: "frank@example.com", CapRoles: []string{"unlocker"}},
			roles: []string{"unlocker"},
			perms: []policy.Permission{"lockout", "status"},
		},
		{
			name:  "a glob grant cannot confer unlock",
			p:     load(t, "unlock.yaml"),
			s:     policy.Subject{Principal: "gina@example.com"},
			roles: []string{"unlocker"},
			perms: []policy.Permission{"lockout", "status"},
		},
		{
			name:  "a grant naming the principal exactly confers unlock",
			p:     load(t, "unlock.yaml"),
			s:     policy.Subject{Principal: "erin@example.com"},
			roles: []string{"unlocker"},
			perms: []policy.Permission{"lockout", "unlock", "status"},
		},
		{
			name:  "a grant naming an alias exactly confers unlock",
			p:     load(t, "unlock.yaml"),
			s:     policy.Subject{Principal: "tag:a", Aliases: []string{"tag:owner"}},
			roles: []string{"unlocker"},
			perms: []policy.Permission{"lockout", "unlock", "status"},
		},
		{
			name:     "tag principal granted by glob",
			p:        decide,
			s:        tagAgent,
			roles:    []string{"agent"},
			perms:    []policy.Permission{"exec", "status"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/true": policy.Allow, "/bin/sh": policy.Allow, "/bin/ls": policy.Deny},
		},
		{
			name:     "tag principal, no operator role in policy",
			p:        noOp,
			s:        policy.Subject{Principal: "tag:ci"},
			roles:    []string{"agent"},
			perms:    []policy.Permission{"exec"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow},
		},
		{
			name:     "exact grant with * commands",
			p:        decide,
			s:        admin,
			roles:    []string{"admin"},
			perms:    []policy.Permission{"exec", "approve", "audit-read"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/true": policy.Allow, "/bin/sh": policy.Allow, "/bin/ls": policy.Deny},
		},
		{
			name:      "commands without exec permission",
			p:         decide,
			s:         watcher,
			roles:     []string{"watcher"},
			perms:     []policy.Permission{"status"},
			commands:  map[string]policy.Result{"/bin/sh": policy.Deny, "/bin/echo": policy.Deny},
			denyMatch: "carol@example.com may not use it",
		},
		{
			name:     "stranger",
			p:        decide,
			s:        stranger,
			commands: map[string]policy.Result{"/bin/echo": policy.Deny, "/bin/sh": policy.Deny},
		},
		{
			name:     "exact grant does not match a longer principal",
			p:        decide,
			s:        policy.Subject{Principal: "bob@example.com.evil.test"},
			commands: map[string]policy.Result{"/bin/echo": policy.Deny},
		},
		{
			name:     "empty principal",
			p:        decide,
			s:        policy.Subject{},
			commands: map[string]policy.Result{"/bin/echo": policy.Deny},
		},
		{
			name:     "transport role the policy does not define",
			p:        decide,
			s:        policy.Subject{Principal: "local:x", Roles: []string{"root"}},
			roles:    []string{"root"},
			commands: map[string]policy.Result{"/bin/echo": policy.Deny},
		},
		{
			name:  "transport and grant roles are merged without duplicates",
			p:     decide,
			s:     policy.Subject{Principal: "tag:agent", Roles: []string{"operator", "agent"}},
			roles: []string{"operator", "agent"},
			perms: []policy.Permission{"exec", "lockout", "unlock", "pause", "resume", "status"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Roles(tc.s); !slices.Equal(got, tc.roles) {
				t.Errorf("Roles = %q, want %q", got, tc.roles)
			}
			got := tc.p.Permissions(tc.s)
			if !slices.Equal(got, tc.perms) {
				t.Errorf("Permissions = %q, want %q", got, tc.perms)
			}
			for _, perm := range allPerms {
				if want := slices.Contains(tc.perms, perm); tc.p.Allows(tc.s, perm) != want {
					t.Errorf("Allows(%s) = %v, want %v", perm, !want, want)
				}
			}
			if tc.p.Allows(tc.s, "*") || tc.p.Allows(tc.s, "") {
				t.Error("Allows grants a permission that does not exist")
			}
			if slices.Contains(tc.s.Roles, policy.OperatorRole) {
				for _, perm := range policy.OperatorBaseline {
					if !tc.p.Allows(tc.s, perm) {
						t.Errorf("operator lacks baseline permission %s", perm)
					}
				}
			}
			for bin, want := range tc.commands {
				d := tc.p.DecideExec(tc.s, policy.Request{Argv: []string{bin}})
				if d.Result != want {
					t.Errorf("DecideExec(%s) = %v (%s), want %v", bin, d.Result, d.Reason, want)
				}
				if d.Result == policy.Allow && !tc.p.Allows(tc.s, policy.PermExec) {
					t.Errorf("DecideExec(%s) allowed without the exec permission", bin)
				}
				if d.Result == policy.Deny && !strings.Contains(d.Reason, tc.denyMatch) {
					t.Errorf("DecideExec(%s) reason %q does not contain %q", bin, d.Reason, tc.denyMatch)
				}
			}
		})
	}
}

func TestLocalOperator(t *testing.T) {
	p := load(t, "decide.yaml")
	for _, tc := range []struct {
		user   string
		groups []string
		want   bool
	}{
		{"alice", nil, true},
		{"alice", []string{"staff"}, true},
		{"dave", []string{"staff", "wheel"}, true},
		{"dave", []string{"staff"}, false},
		{"dave", nil, false},
		{"", nil, false},
		{"", []string{""}, false},
		{"wheel", nil, false},              // a group name is not a user name
		{"dave", []string{"alice"}, false}, // nor the reverse
		{"Alice", nil, false},
		{"alice ", nil, false},
	} {
		if got := p.LocalOperator(tc.user, tc.groups); got != tc.want {
			t.Errorf("LocalOperator(%q, %q) = %v, want %v", tc.user, tc.groups, got, tc.want)
		}
	}
	if load(t, "local.yaml").LocalOperator("root", []string{"root", "wheel"}) {
		t.Error("the example policy names no local operators, yet root is one")
	}
}

// execCases are DecideExec cases against testdata/valid/decide.yaml whose
// outcome does not depend on the host's file layout. Their argvs also seed
// FuzzDecideExec.
var execCases = []struct {
	name   string
	s      policy.Subject
	argv   []string
	result policy.Result
	reason string
	rule   string // the rule's name, when allowed
}{
	{"allowed", tagAgent, []string{"/bin/echo", "hi"}, policy.Allow, `allowed by rule "echo"`, "echo"},
	{"allowed with flags", tagAgent, []string{"/bin/echo", "-n", "--x=y", "hi"}, policy.Allow, `allowed by rule "echo"`, "echo"},
	{"allowed without args", tagAgent, []string{"/bin/true"}, policy.Allow, `allowed by rule "true"`, "true"},
	{"no args rule refuses an argument", tagAgent, []string{"/bin/true", "x"}, policy.Deny,
		`no rule allows it: rule "true": 1 positional argument, rule expects 0`, ""},
	{"no args rule refuses an empty argument", tagAgent, []string{"/bin/true", ""}, policy.Deny,
		`no rule allows it: rule "true": 1 positional argument, rule expects 0`, ""},
	{"no flags rule refuses a flag", tagAgent, []string{"/bin/true", "--help"}, policy.Deny,
		`no rule allows it: rule "true": flag --help is not allowed`, ""},
	{"no flags rule refuses a short flag", tagAgent, []string{"/bin/true", "-v"}, policy.Deny,
		`no rule allows it: rule "true": flag -v is not allowed`, ""},
	{"first usable rule, not first matching", tagAgent, []string{"/bin/sh", "-c", "echo hi"}, policy.Allow, `allowed by rule "sh-native"`, "sh-native"},
	{"star takes the first matching rule", admin, []string{"/bin/sh", "-c", "true"}, policy.Allow, `allowed by rule "sh"`, "sh"},
	{"operator role", localOperator, []string{"/bin/echo"}, policy.Allow, `allowed by rule "echo"`, "echo"},
	{"rule matches but not the principal's", localOperator, []string{"/bin/sh"}, policy.Deny,
		`no rule allows it: rule "sh": local:alice may not use it; rule "sh-native": local:alice may not use it`, ""},
	{"rule matches, no exec permission", watcher, []string{"/bin/sh"}, policy.Deny,
		`no rule allows it: rule "sh": carol@example.com may not use it`, ""},
	{"stranger", stranger, []string{"/bin/echo", "hi"}, policy.Deny, `no rule allows it: rule "echo": mallory@example.com may not use it`, ""},
	{"no rule", admin, []string{"/usr/bin/id"}, policy.Deny, "no rule allows /usr/bin/id", ""},
	{"bare name", admin, []string{"echo", "hi"}, policy.Allow, `allowed by rule "echo"`, "echo"},
	{"bare name, stranger", stranger, []string{"echo", "hi"}, policy.Deny, `no rule allows it: rule "echo": mallory@example.com may not use it`, ""},
	{"bare name no rule has", admin, []string{"id"}, policy.Deny, "no rule names a command called id", ""},
	{"bare name with a dot", admin, []string{"echo.sh"}, policy.Deny, "no rule names a command called echo.sh", ""},
	{"relative with dir", admin, []string{"bin/echo"}, policy.Deny, "bin/echo is neither an absolute path nor a command name", ""},
	{"dot", admin, []string{"."}, policy.Deny, ". is neither an absolute path nor a command name", ""},
	// Hostile argvs.
	{"nil argv", admin, nil, policy.Deny, "empty argv", ""},
	{"empty argv", admin, []string{}, policy.Deny, "empty argv", ""},
	{"empty argv0", admin, []string{""}, policy.Deny, " is neither an absolute path nor a command name", ""},
	{"empty argv0 with args", admin, []string{"", "/bin/echo"}, policy.Deny, " is neither an absolute path nor a command name", ""},
	{"huge argv0", admin, []string{"/" + strings.Repeat("a", 100<<10)}, policy.Deny, "binary /aaaa", ""},
	{"huge argv0 after the binary", admin, []string{"/bin/echo" + strings.Repeat("/", 100<<10)}, policy.Deny, "binary /bin/echo//", ""},
	{"huge argument", admin, []string{"/bin/true", strings.Repeat("x", 100<<10)}, policy.Deny,
		`no rule allows it: rule "true": 1 positional argument, rule expects 0`, ""},
	{"huge argument allowed", admin, []string{"/bin/echo", strings.Repeat("x", 100<<10)}, policy.Allow, `allowed by rule "echo"`, "echo"},
	{"division slash", admin, []string{"\u2215bin\u2215echo"}, policy.Deny, "\u2215bin\u2215echo is neither an absolute path nor a command name", ""},
	{"cyrillic e", admin, []string{"/bin/\u0435cho"}, policy.Deny, "binary /bin/\u0435cho is not on this host", ""},
	{"fullwidth solidus", admin, []string{"\uff0fbin\uff0fecho"}, policy.Deny, "\uff0fbin\uff0fecho is neither an absolute path nor a command name", ""},
	{"zero-width space", admin, []string{"/bin/\u200becho"}, policy.Deny, "binary /bin/\u200becho is not on this host", ""},
	{"trailing slash", admin, []string{"/bin/echo/"}, policy.Deny, "binary /bin/echo/ is not on this host", ""},
	{"trailing dot", admin, []string{"/bin/echo/."}, policy.Deny, "binary /bin/echo/. is not on this host", ""},
	{"NUL inside", admin, []string{"/bin/echo\x00"}, policy.Deny, "binary /bin/echo\x00 is not on this host", ""},
	{"NUL then path", admin, []string{"/bin/echo\x00/bin/sh"}, policy.Deny, "binary /bin/echo\x00/bin/sh is not on this host", ""},
	{"NUL first", admin, []string{"\x00/bin/echo"}, policy.Deny, "\x00/bin/echo is neither an absolute path nor a command name", ""},
	{"leading space", admin, []string{" /bin/echo"}, policy.Deny, " /bin/echo is neither an absolute path nor a command name", ""},
	{"trailing space", admin, []string{"/bin/echo "}, policy.Deny, "binary /bin/echo  is not on this host", ""},
	{"trailing newline", admin, []string{"/bin/echo\n"}, policy.Deny, "binary /bin/echo\n is not on this host", ""},
	{"upper case", admin, []string{"/BIN/ECHO"}, policy.Deny, "binary /BIN/ECHO is not on this host", ""},
	{"invalid UTF-8", admin, []string{"/bin/\xffecho"}, policy.Deny, "binary /bin/\xffecho is not on this host", ""},
	{"glob in argv0", admin, []string{"/bin/*"}, policy.Deny, "binary /bin/* is not on this host", ""},
	{"star as argv0", admin, []string{"*"}, policy.Deny, "* is neither an absolute path nor a command name", ""},
	{"directory", admin, []string{"/bin"}, policy.Deny, "no rule allows /bin", ""},
	{"binary only in a later arg", tagAgent, []string{"/usr/bin/env", "/bin/echo"}, policy.Deny, "no rule allows /usr/bin/env", ""},
}

func TestDecideExec(t *testing.T) {
	p := load(t, "decide.yaml")
	for _, tc := range execCases {
		t.Run(tc.name, func(t *testing.T) {
			d := p.DecideExec(tc.s, policy.Request{Argv: tc.argv})
			if d.Result != tc.result {
				t.Errorf("Result = %v (%.200s), want %v", d.Result, d.Reason, tc.result)
			}
			if !strings.HasPrefix(d.Reason, tc.reason) {
				t.Errorf("Reason = %.200q, want prefix %.200q", d.Reason, tc.reason)
			}
			if tc.result == policy.Allow {
				if d.Rule == nil {
					t.Fatal("allowed without a rule")
				}
				bin := tc.argv[0]
				if policy.IsCommandName(bin) {
					bin = "/bin/" + bin // the rules of decide.yaml
				}
				if d.Rule.Name != tc.rule || d.Rule.Resolved != resolve(t, bin) {
					t.Errorf("Rule = %q (%s), want %q (%s)", d.Rule.Name, d.Rule.Resolved, tc.rule, tc.argv[0])
				}
				if !slices.Contains(p.Rules(), d.Rule) {
					t.Error("Rule is not one of the policy's rules")
				}
			} else if d.Rule != nil {
				t.Errorf("denied with rule %q", d.Rule.Name)
			}
			if d.WouldDeny != nil {
				t.Errorf("WouldDeny = %q with no deny rules", d.WouldDeny)
			}
		})
	}
}

// resolve is filepath.EvalSymlinks, failing the test on error.
func resolve(t testing.TB, path string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDecideExecPathSpellings: argv[0] is compared after resolving symbolic
// links, so every spelling of the rule's file matches (on merged-/usr hosts
// /usr/bin/echo and /bin/echo are one file) and no other file does.
func TestDecideExecPathSpellings(t *testing.T) {
	p := load(t, "decide.yaml")
	echo := resolve(t, "/bin/echo")
	for _, argv0 := range []string{
		"/bin/echo", "/usr/bin/echo", "//bin/echo", "/bin//echo", "/bin/./echo",
		"/usr/../bin/echo", "/bin/../bin/echo", "/usr/bin/../bin/echo", echo,
	} {
		d := p.DecideExec(admin, policy.Request{Argv: []string{argv0, "hi"}})
		r, err := filepath.EvalSymlinks(argv0)
		switch {
		case err != nil:
			if d.Result != policy.Deny || !strings.Contains(d.Reason, "is not on this host") {
				t.Errorf("%s (absent here): %v, %s", argv0, d.Result, d.Reason)
			}
		case r == echo:
			if d.Result != policy.Allow || d.Rule.Name != "echo" {
				t.Errorf("%s (same file as /bin/echo): %v, %s", argv0, d.Result, d.Reason)
			}
		default:
			if d.Result != policy.Deny {
				t.Errorf("%s (another file): %v, %s", argv0, d.Result, d.Reason)
			}
		}
	}
}

// TestDecideExecRelativeIgnoresWorkingDirectory: a relative argv[0] is never
// resolved against the process's working directory, even where that
// directory holds a link to an allowed binary.
func TestDecideExecRelativeIgnoresWorkingDirectory(t *testing.T) {
	p := load(t, "decide.yaml")
	dir := t.TempDir()
	if err := os.Symlink("/bin/echo", filepath.Join(dir, "echo")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, argv0 := range []string{"./echo", "../" + filepath.Base(dir) + "/echo"} {
		if d := p.DecideExec(admin, policy.Request{Argv: []string{argv0}}); d.Result != policy.Deny {
			t.Errorf("DecideExec(%q) = %v (%s), want deny", argv0, d.Result, d.Reason)
		}
	}
	// A bare name is the policy's to resolve: the rule's binary, never
	// the working directory's (nor PATH's).
	d := p.DecideExec(admin, policy.Request{Argv: []string{"echo"}})
	if want, _ := filepath.EvalSymlinks("/bin/echo"); d.Result != policy.Allow || d.Rule.Resolved != want {
		t.Errorf("DecideExec(echo) = %v (%s), want the rule's %s", d.Result, d.Reason, want)
	}
}

func TestDecideExecRuleSettings(t *testing.T) {
	p := load(t, "decide.yaml")
	d := p.DecideExec(admin, policy.Request{Argv: []string{"/bin/sh"}})
	if d.Rule == nil {
		t.Fatalf("denied: %s", d.Reason)
	}
	if d.Rule.Sandbox != policy.SandboxBwrap || d.Rule.Timeout.String() != "5m0s" || d.Rule.MaxOutput != 64<<10 || d.Rule.Line != 43 {
		t.Errorf("rule = %+v", *d.Rule)
	}
}

func TestResultString(t *testing.T) {
	if policy.Allow.String() != "allow" || policy.Deny.String() != "deny" || policy.Result(7).String() != "deny" {
		t.Error("Result.String")
	}
	var zero policy.Decision
	if zero.Result != policy.Deny {
		t.Error("the zero Decision must deny")
	}
}

const argvSep = "\x00"

// fuzzDenyPolicy adds deny rules, in force and in report mode, in front of
// allow rules that accept anything, so that the fuzzer can check that no
// deny rule is bypassed.
const fuzzDenyPolicy = `version: 1
roles:
  all:
    permissions: [exec]
    commands: ["*"]
grants:
  - principals: ["*"]
    roles: [all]
commands:
  - name: no-secret
    effect: deny
    binary: /bin/echo
    args: [secret, "**"]
  - name: no-token-flag
    effect: deny
    binary: /bin/echo
    if_flags: [--show-token, -t]
    reason: never the token
  - name: no-rm-rf
    effect: deny
    binary: /bin/sh
    args: ["-c", "rm *"]
  - name: report-cat
    effect: deny
    binary: /bin/cat
    args: ["/etc/*"]
    report: true
  - name: echo
    binary: /bin/echo
    args: ["**"]
    flags: any
    env: [NO_COLOR]
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
  - name: cat
    binary: /bin/cat
    args: ["*"]
    flags:
      -n: true
      --number: true
`

func FuzzDecideExec(f *testing.F) {
	for _, tc := range execCases {
		f.Add(strings.Join(tc.argv, argvSep), "")
	}
	for _, tc := range featureCases {
		f.Add(strings.Join(tc.argv, argvSep), strings.Join(tc.env, argvSep))
	}
	f.Add("/bin/echo\x00secret", "NO_COLOR")
	f.Add("/bin/echo\x00-nt", "")
	f.Add("/bin/echo\x00--show-tok", "")
	f.Add("/bin/sh\x00-c\x00rm -rf /", "")
	f.Add("/bin/cat\x00-n\x00/etc/passwd", "")
	decide := load(f, "decide.yaml")
	deny, err := policy.Parse("fuzz-deny.yaml", []byte(fuzzDenyPolicy))
	if err != nil {
		f.Fatal(err)
	}
	subjects := []policy.Subject{localOperator, tagAgent, admin, watcher, remoteOp, stranger}
	f.Fuzz(func(t *testing.T, in, env string) {
		var req policy.Request
		if in != "" {
			req.Argv = strings.Split(in, argvSep)
		}
		if env != "" {
			req.Env = strings.Split(env, argvSep)
		}
		for _, p := range []*policy.Policy{decide, deny} {
			for _, s := range subjects {
				checkDecision(t, p, s, req)
			}
		}
	})
}

// checkDecision asserts what every decision guarantees.
func checkDecision(t *testing.T, p *policy.Policy, s policy.Subject, req policy.Request) {
	t.Helper()
	d := p.DecideExec(s, req)
	if d.Reason == "" {
		t.Fatalf("%s: %v %q without a reason", s.Principal, d.Result, req.Argv)
	}
	switch d.Result {
	case policy.Allow:
	case policy.Deny:
		if d.Rule != nil && (d.Rule.Effect != policy.Deny || d.Rule.Report) {
			t.Fatalf("%s: denied %q by rule %q, which cannot deny", s.Principal, req.Argv, d.Rule.Name)
		}
		return
	default:
		t.Fatalf("%s: result %d", s.Principal, d.Result)
	}
	r := d.Rule
	if r == nil {
		t.Fatalf("%s: allowed %q without a rule", s.Principal, req.Argv)
	}
	if r.Effect != policy.Allow {
		t.Fatalf("%s: allowed %q by deny rule %q", s.Principal, req.Argv, r.Name)
	}
	switch {
	case policy.IsCommandName(req.Argv[0]):
		// A bare name runs the rule's own binary, a rule of that name.
		if r.Command() != req.Argv[0] || r.Resolved == "" {
			t.Fatalf("%s: allowed bare %q by rule %q for %s", s.Principal, req.Argv[0], r.Name, r.Binary)
		}
		// And never where the same request by the path it runs is denied.
		for _, path := range []string{r.Binary, r.Resolved} {
			byPath := policy.Request{Argv: append([]string{path}, req.Argv[1:]...), Env: req.Env}
			if dp := p.DecideExec(s, byPath); dp.Result != policy.Allow {
				t.Fatalf("%s: allowed bare %q by rule %q, but by its path %s: %q", s.Principal, req.Argv, r.Name, path, dp.Reason)
			}
		}
	case !filepath.IsAbs(req.Argv[0]):
		t.Fatalf("%s: allowed relative %q", s.Principal, req.Argv[0])
	default:
		if bin, err := filepath.EvalSymlinks(req.Argv[0]); err != nil || bin != r.Resolved {
			t.Fatalf("%s: allowed %q by rule %q for %s (%s)", s.Principal, req.Argv, r.Name, r.Resolved, bin)
		}
	}
	if !p.Allows(s, policy.PermExec) {
		t.Fatalf("%s: allowed %q without the exec permission", s.Principal, req.Argv)
	}
	if ok, why := r.Args.MatchAllow(req.Argv[1:]); !ok {
		t.Fatalf("%s: allowed %q by rule %q whose args do not match: %s", s.Principal, req.Argv, r.Name, why)
	}
	for _, e := range req.Env {
		if !slices.Contains(r.Env, e) {
			t.Fatalf("%s: allowed env %q by rule %q", s.Principal, e, r.Name)
		}
	}
	var would []string
	for _, dr := range p.Rules() {
		if dr.Effect == policy.Deny && (dr.Resolved == r.Resolved || dr.Command() == req.Argv[0]) && dr.Args.MatchDeny(req.Argv[1:]) {
			if !dr.Report {
				t.Fatalf("%s: allowed %q that deny rule %q matches", s.Principal, req.Argv, dr.Name)
			}
			would = append(would, dr.Name)
		}
	}
	if !slices.Equal(d.WouldDeny, would) {
		t.Fatalf("%s: %q WouldDeny = %q, want %q", s.Principal, req.Argv, d.WouldDeny, would)
	}
}

// Decisions run concurrently on one loaded policy (the server's requests):
// matching writes nothing to the rules, which -race checks.
func TestDecideExecConcurrent(t *testing.T) {
	p := load(t, "decide.yaml")
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, tc := range execCases {
				p.DecideExec(tc.s, policy.Request{Argv: tc.argv})
			}
		}()
	}
	for range 4 {
		<-done
	}
}
