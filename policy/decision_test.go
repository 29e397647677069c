package policy_test

import (
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
			perms:    []policy.Permission{"exec", "lockout", "unlock", "pause", "resume", "status"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/true": policy.Allow, "/bin/sleep": policy.Allow, "/bin/sh": policy.Allow, "/bin/ls": policy.Deny},
		},
		{
			name:     "remote principal granted the operator role",
			p:        decide,
			s:        remoteOp,
			roles:    []string{"operator"},
			perms:    []policy.Permission{"exec", "lockout", "unlock", "pause", "resume", "status"},
			commands: map[string]policy.Result{"/bin/echo": policy.Allow, "/bin/sh": policy.Deny},
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
				d := tc.p.DecideExec(tc.s, []string{bin, "arg"})
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

// execCases are DecideExec cases against testdata/valid/decide.yaml. Their
// argvs also seed FuzzDecideExec.
var execCases = []struct {
	name   string
	s      policy.Subject
	argv   []string
	result policy.Result
	reason string
	rule   string // the rule's name, when allowed
}{
	{"allowed", tagAgent, []string{"/bin/echo", "hi"}, policy.Allow, `rule "echo" allows /bin/echo`, "echo"},
	{"allowed without args", tagAgent, []string{"/bin/true"}, policy.Allow, `rule "true" allows /bin/true`, "true"},
	{"first usable rule, not first matching", tagAgent, []string{"/bin/sh", "-c", "echo hi"}, policy.Allow, `rule "sh-native" allows /bin/sh`, "sh-native"},
	{"star takes the first matching rule", admin, []string{"/bin/sh", "-c", "true"}, policy.Allow, `rule "sh" allows /bin/sh`, "sh"},
	{"operator role", localOperator, []string{"/bin/echo"}, policy.Allow, `rule "echo" allows /bin/echo`, "echo"},
	{"rule matches but not the principal's", localOperator, []string{"/bin/sh"}, policy.Deny, `rule "sh" matches /bin/sh but local:alice may not use it`, ""},
	{"rule matches, no exec permission", watcher, []string{"/bin/sh"}, policy.Deny, `rule "sh" matches /bin/sh but carol@example.com may not use it`, ""},
	{"stranger", stranger, []string{"/bin/echo", "hi"}, policy.Deny, `rule "echo" matches /bin/echo but mallory@example.com may not use it`, ""},
	{"no rule", admin, []string{"/usr/bin/id"}, policy.Deny, "no rule allows /usr/bin/id", ""},
	// Exact path semantics: another path to the same binary is no match.
	{"other path to the binary", admin, []string{"/usr/bin/echo"}, policy.Deny, "no rule allows /usr/bin/echo", ""},
	{"double slash", admin, []string{"//bin/echo"}, policy.Deny, "no rule allows //bin/echo", ""},
	{"inner double slash", admin, []string{"/bin//echo"}, policy.Deny, "no rule allows /bin//echo", ""},
	{"dot segment", admin, []string{"/bin/./echo"}, policy.Deny, "no rule allows /bin/./echo", ""},
	{"dot-dot segment", admin, []string{"/usr/../bin/echo"}, policy.Deny, "no rule allows /usr/../bin/echo", ""},
	{"relative", admin, []string{"echo"}, policy.Deny, "no rule allows echo", ""},
	{"relative with dir", admin, []string{"bin/echo"}, policy.Deny, "no rule allows bin/echo", ""},
	// Hostile argvs.
	{"nil argv", admin, nil, policy.Deny, "empty argv", ""},
	{"empty argv", admin, []string{}, policy.Deny, "empty argv", ""},
	{"empty argv0", admin, []string{""}, policy.Deny, "no rule allows ", ""},
	{"empty argv0 with args", admin, []string{"", "/bin/echo"}, policy.Deny, "no rule allows ", ""},
	{"huge argv0", admin, []string{"/" + strings.Repeat("a", 100<<10)}, policy.Deny, "no rule allows /aaaa", ""},
	{"huge argv0 after the binary", admin, []string{"/bin/echo" + strings.Repeat("/", 100<<10)}, policy.Deny, "no rule allows /bin/echo//", ""},
	{"division slash", admin, []string{"\u2215bin\u2215echo"}, policy.Deny, "no rule allows \u2215bin\u2215echo", ""},
	{"cyrillic e", admin, []string{"/bin/\u0435cho"}, policy.Deny, "no rule allows /bin/\u0435cho", ""},
	{"fullwidth solidus", admin, []string{"\uff0fbin\uff0fecho"}, policy.Deny, "no rule allows", ""},
	{"zero-width space", admin, []string{"/bin/\u200becho"}, policy.Deny, "no rule allows", ""},
	{"trailing slash", admin, []string{"/bin/echo/"}, policy.Deny, "no rule allows /bin/echo/", ""},
	{"trailing dot", admin, []string{"/bin/echo/."}, policy.Deny, "no rule allows /bin/echo/.", ""},
	{"NUL inside", admin, []string{"/bin/echo\x00"}, policy.Deny, "no rule allows /bin/echo\x00", ""},
	{"NUL then path", admin, []string{"/bin/echo\x00/bin/sh"}, policy.Deny, "no rule allows", ""},
	{"NUL first", admin, []string{"\x00/bin/echo"}, policy.Deny, "no rule allows", ""},
	{"leading space", admin, []string{" /bin/echo"}, policy.Deny, "no rule allows", ""},
	{"trailing space", admin, []string{"/bin/echo "}, policy.Deny, "no rule allows", ""},
	{"trailing newline", admin, []string{"/bin/echo\n"}, policy.Deny, "no rule allows", ""},
	{"upper case", admin, []string{"/BIN/ECHO"}, policy.Deny, "no rule allows /BIN/ECHO", ""},
	{"invalid UTF-8", admin, []string{"/bin/\xffecho"}, policy.Deny, "no rule allows", ""},
	{"glob in argv0", admin, []string{"/bin/*"}, policy.Deny, "no rule allows /bin/*", ""},
	{"star as argv0", admin, []string{"*"}, policy.Deny, "no rule allows *", ""},
	{"binary only in a later arg", tagAgent, []string{"/usr/bin/env", "/bin/echo"}, policy.Deny, "no rule allows /usr/bin/env", ""},
}

func TestDecideExec(t *testing.T) {
	p := load(t, "decide.yaml")
	for _, tc := range execCases {
		t.Run(tc.name, func(t *testing.T) {
			d := p.DecideExec(tc.s, tc.argv)
			if d.Result != tc.result {
				t.Errorf("Result = %v (%s), want %v", d.Result, d.Reason, tc.result)
			}
			if !strings.HasPrefix(d.Reason, tc.reason) {
				t.Errorf("Reason = %.200q, want prefix %.200q", d.Reason, tc.reason)
			}
			if tc.result == policy.Allow {
				if d.Rule == nil {
					t.Fatal("allowed without a rule")
				}
				if d.Rule.Name != tc.rule || d.Rule.Binary != tc.argv[0] {
					t.Errorf("Rule = %q (%s), want %q (%s)", d.Rule.Name, d.Rule.Binary, tc.rule, tc.argv[0])
				}
				if !slices.Contains(p.Rules(), d.Rule) {
					t.Error("Rule is not one of the policy's rules")
				}
			} else if d.Rule != nil {
				t.Errorf("denied with rule %q", d.Rule.Name)
			}
		})
	}
}

func TestDecideExecRuleSettings(t *testing.T) {
	p := load(t, "decide.yaml")
	d := p.DecideExec(admin, []string{"/bin/sh"})
	if d.Rule == nil {
		t.Fatalf("denied: %s", d.Reason)
	}
	if d.Rule.Sandbox != policy.SandboxBwrap || d.Rule.Timeout.String() != "5m0s" || d.Rule.MaxOutput != 64<<10 || d.Rule.Line != 40 {
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

func FuzzDecideExec(f *testing.F) {
	for _, tc := range execCases {
		f.Add(strings.Join(tc.argv, argvSep))
	}
	p := load(f, "decide.yaml")
	subjects := []policy.Subject{localOperator, tagAgent, admin, watcher, remoteOp, stranger}
	f.Fuzz(func(t *testing.T, in string) {
		var argv []string
		if in != "" {
			argv = strings.Split(in, argvSep)
		}
		for _, s := range subjects {
			d := p.DecideExec(s, argv)
			switch d.Result {
			case policy.Allow:
				if d.Rule == nil {
					t.Fatalf("%s: allowed %q without a rule", s.Principal, argv)
				}
				if d.Rule.Binary != argv[0] {
					t.Fatalf("%s: allowed %q by rule %q for %s", s.Principal, argv, d.Rule.Name, d.Rule.Binary)
				}
				if !p.Allows(s, policy.PermExec) {
					t.Fatalf("%s: allowed %q without the exec permission", s.Principal, argv)
				}
				if d.Reason == "" {
					t.Fatalf("%s: allowed %q without a reason", s.Principal, argv)
				}
			case policy.Deny:
				if d.Reason == "" {
					t.Fatalf("%s: denied %q without a reason", s.Principal, argv)
				}
			default:
				t.Fatalf("%s: result %d", s.Principal, d.Result)
			}
		}
	})
}
