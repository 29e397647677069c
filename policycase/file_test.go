package policycase

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/policy"
)

const goodFile = `version: 1
cases:
  - name: agent echoes
    principal: tag:agent
    argv: [echo, hi]
    expect: allow
    rule: echo
  - {name: env passed, principal: tag:agent, roles: [dev], argv: [echo], env: [GH_REPO], expect: deny, code: policy-deny}
`

func TestParse(t *testing.T) {
	s, err := Parse("t.tests.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Cases) != 2 {
		t.Fatalf("cases = %d", len(s.Cases))
	}
	c := s.Cases[1]
	if c.Name != "env passed" || c.Principal != "tag:agent" || c.Roles[0] != "dev" || c.Env[0] != "GH_REPO" || c.Expect != Deny || c.Code != "policy-deny" || c.Line != 8 || c.Column != 5 {
		t.Errorf("case = %+v", c)
	}
	if s.Cases[0].Rule != "echo" || strings.Join(s.Cases[0].Argv, " ") != "echo hi" {
		t.Errorf("case = %+v", s.Cases[0])
	}
}

// hostileFiles are refused, each at the place named.
var hostileFiles = []struct {
	name, data, want string
}{
	{"empty", "", "t: empty tests file"},
	{"not a mapping", "- a\n", "t:1:1: tests file must be a mapping"},
	{"no version", "cases: []\n", "version: 1 is required"},
	{"version 2", "version: 2\ncases: []\n", "t:1:10: version must be 1"},
	{"no cases", "version: 1\ncases: []\n", "tests file has no cases"},
	{"unknown top key", "version: 1\ntests: []\n", `t:2:1: tests file: unknown key "tests"`},
	{"unknown case key", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny, cwd: /}\n", `t:3:54: case: unknown key "cwd"`},
	{"duplicate key", "version: 1\nversion: 1\ncases: []\n", `t:2:1: tests file: key "version" given twice`},
	{"duplicate case", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny}\n  - {name: a, principal: p, argv: [x], expect: deny}\n", `t:4:5: case "a" named twice`},
	{"bad expect", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: maybe}\n", `t:3:48: expect must be allow, confirm or deny, not "maybe"`},
	{"allow without rule", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: allow}\n", `t:3:5: case "a" expects allow: name the rule`},
	{"no principal", "version: 1\ncases:\n  - {name: a, argv: [x], expect: deny}\n", `case "a" needs a principal`},
	{"no argv", "version: 1\ncases:\n  - {name: a, principal: p, argv: [], expect: deny}\n", `case "a" needs an argv`},
	{"empty argv0", "version: 1\ncases:\n  - {name: a, principal: p, argv: [\"\"], expect: deny}\n", `case "a" needs an argv`},
	{"argv not a list", "version: 1\ncases:\n  - {name: a, principal: p, argv: x, expect: deny}\n", "t:3:35: argv must be a list"},
	{"nested argv", "version: 1\ncases:\n  - {name: a, principal: p, argv: [[x]], expect: deny}\n", "t:3:36: argv must be a string"},
	{"null name", "version: 1\ncases:\n  - {name: ~, principal: p, argv: [x], expect: deny}\n", "t:3:12: name is empty"},
	{"bad code", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny, code: rate-limit}\n", `code must be policy-deny or permission-denied, not "rate-limit"`},
	{"code with allow", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: allow, rule: r, code: policy-deny}\n", `case "a" expects allow: a code is for a deny`},
	{"env with value", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], env: [A=b], expect: deny}\n", `env lists variable names (no "="), not "A=b"`},
	{"tagged", "version: 1\ncases:\n  - {name: !!binary aGk=, principal: p, argv: [x], expect: deny}\n", "t:3:12: name: explicit tags are not allowed"},
	{"merge key", "version: 1\nbase: &b {principal: p}\ncases:\n  - {<<: *b, name: a, argv: [x], expect: deny}\n", `unknown key "base"`},
	{"merge key in case", "version: 1\ncases:\n  - &c {name: a, principal: p, argv: [x], expect: deny}\n  - {<<: *c, name: b}\n", "t:4:6: case: keys must be plain names"},
	{"syntax", "version: 1\ncases: [\n", "t:2:"},
	{"deep", "version: 1\ncases: " + strings.Repeat("[", 20) + strings.Repeat("]", 20) + "\n", "nested more than"},
	{"alias bomb", "version: 1\na: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", "more than 100000 values"},
	{"huge", "version: 1\n#" + strings.Repeat("x", MaxFileSize) + "\n", "larger than"},
	{"not utf-8", "version: 1\nname: \xff\n", "not valid UTF-8"},
	{"long string", "version: 1\ncases:\n  - {name: " + strings.Repeat("a", MaxString+1) + ", principal: p, argv: [x], expect: deny}\n", "name is longer than 4096 bytes"},
	{"many args", "version: 1\ncases:\n  - {name: a, principal: p, expect: deny, argv: [" + strings.Repeat("x,", MaxArgs) + "x]}\n", "argv has more than 256 entries"},
	{"two documents", "version: 1\ncases:\n  - {name: a, principal: p, argv: [x], expect: deny}\n---\nversion: 1\n", "t:4:1: a tests file must be a single YAML document"},
}

func TestParseHostile(t *testing.T) {
	for _, c := range hostileFiles {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t", []byte(c.data))
			if err == nil {
				t.Fatalf("accepted")
			}
			var pe *policy.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *policy.Error", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFile(filepath.Join(dir, "none.tests.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.tests.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
	big := filepath.Join(dir, "big.tests.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a large file: %v", err)
	}
}
