package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// cwdRoot is a workspace with a subdirectory, a file, links inside and
// out, and a sibling directory whose name starts like the workspace's.
func cwdRoot(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "ws"), filepath.Join(base, "ws-outside")
	for _, d := range []string{root, outside, filepath.Join(root, "sub", "deeper")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"out": outside, "up": "..", "in": "sub", "loop": "loop", "sneaky": "sub/../../ws-outside"} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

// A request's cwd is resolved inside the rule's workspace; whatever a
// caller writes, it never names a directory outside it.
func TestResolveInsideHostile(t *testing.T) {
	root, _ := cwdRoot(t)
	real, _ := filepath.EvalSymlinks(root)
	for _, tc := range []struct {
		cwd  string
		want string // relative to the workspace; "" for a refusal
		code refusal.Code
	}{
		{"", ".", ""},
		{"sub", "sub", ""},
		{"sub/deeper", "sub/deeper", ""},
		{"./sub/../sub/deeper/", "sub/deeper", ""},
		{"in", "sub", ""},
		{"..", "", refusal.PolicyDeny},
		{"sub/../..", "", refusal.PolicyDeny},
		{"../ws-outside", "", refusal.PolicyDeny},
		{"/", "", refusal.BadRequest},
		{root, "", refusal.BadRequest},
		{"out", "", refusal.PolicyDeny},
		{"up", "", refusal.PolicyDeny},
		{"sneaky", "", refusal.PolicyDeny},
		{"loop", "", refusal.BadRequest},
		{"file", "", refusal.BadRequest},
		{"absent", "", refusal.BadRequest},
	} {
		dir, err := resolveInside(root, tc.cwd)
		if tc.want == "" {
			if err == nil || refusal.As(err).Code != tc.code {
				t.Errorf("cwd %q: %q, %v; want refusal %s", tc.cwd, dir, err, tc.code)
			}
			continue
		}
		if err != nil || dir != filepath.Join(real, tc.want) {
			t.Errorf("cwd %q: %q, %v; want %s", tc.cwd, dir, err, tc.want)
		}
	}
}

func FuzzResolveInside(f *testing.F) {
	for _, s := range []string{"", "sub", "..", "sub/../..", "/", "out", "up", "sneaky", "loop", "file", "in/../../ws-outside", "sub\x00", "./././..//"} {
		f.Add(s)
	}
	root, _ := cwdRoot(f)
	real, _ := filepath.EvalSymlinks(root)
	f.Fuzz(func(t *testing.T, cwd string) {
		dir, err := resolveInside(root, cwd)
		if err == nil && dir != real && !strings.HasPrefix(dir, real+"/") {
			t.Fatalf("cwd %q resolved to %q, outside %s", cwd, dir, real)
		}
	})
}

// The caller's own directory maps into the workspace when it lies inside
// it and resolves there; anything else is ignored (the command runs at the
// root), never refused and never followed out.
func TestCallerInside(t *testing.T) {
	root, outside := cwdRoot(t)
	real, _ := filepath.EvalSymlinks(root)
	// A way to the workspace through a link, as a caller may know it.
	via := filepath.Join(t.TempDir(), "via")
	if err := os.Symlink(root, via); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller string
		want   string // relative to the workspace; "" when ignored
	}{
		{root, "."},
		{filepath.Join(root, "sub"), "sub"},
		{filepath.Join(root, "sub", "deeper") + "/", "sub/deeper"},
		{filepath.Join(root, "sub", "..", "sub", "deeper"), "sub/deeper"},
		{filepath.Join(real, "sub"), "sub"},
		{filepath.Join(root, "in"), "sub"},
		{filepath.Join(via, "sub"), ""}, // the caller's link is not the trust point's business
		{filepath.Join(root, "out"), ""},
		{filepath.Join(root, "up"), ""},
		{filepath.Join(root, "sneaky"), ""},
		{filepath.Join(root, "loop"), ""},
		{filepath.Join(root, "file"), ""},
		{filepath.Join(root, "absent"), ""},
		{filepath.Join(root, ".."), ""},
		{filepath.Join(root, "..", "ws-outside"), ""},
		{outside, ""},
		{root + "-outside", ""},
		{"sub", ""}, // relative: not a caller's directory
		{"/", ""},
		{"", ""},
	} {
		dir, ok := callerInside(real, root, tc.caller)
		switch {
		case tc.want == "" && ok:
			t.Errorf("caller %q mapped to %q, want it ignored", tc.caller, dir)
		case tc.want != "" && (!ok || dir != filepath.Join(real, tc.want)):
			t.Errorf("caller %q = %q, %v; want %q", tc.caller, dir, ok, filepath.Join(real, tc.want))
		}
	}
}

// FuzzCallerInside: whatever directory a caller claims, what it maps to
// lies inside the workspace.
func FuzzCallerInside(f *testing.F) {
	root, outside := cwdRoot(f)
	real, _ := filepath.EvalSymlinks(root)
	for _, s := range []string{"", root, root + "/sub", root + "/out", root + "/up/ws-outside", root + "/../ws-outside", outside, "/", "sub", root + "/sub\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, caller string) {
		if dir, ok := callerInside(real, root, caller); ok && dir != real && !strings.HasPrefix(dir, real+"/") {
			t.Fatalf("caller %q mapped to %q, outside %s", caller, dir, real)
		}
	})
}

// CallerCwd turns the caller's directory into the request's cwd once the
// rule is known (what the approver sees is where the command runs): a
// given cwd wins, a temporary workspace takes none, and a directory
// outside, or out through a link, is the root ("").
func TestCallerCwd(t *testing.T) {
	root, outside := cwdRoot(t)
	p, err := policy.Parse("p.yaml", []byte("version: 1\nworkspaces: {ws: "+root+"}\ncommands:\n"+
		"  - {name: named, binary: /bin/true, workspace: ws}\n  - {name: temp, binary: /bin/true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	named, temp := p.Rules()[0], p.Rules()[1]
	for _, tc := range []struct {
		rule        *policy.Rule
		cwd, caller string
		want        string
	}{
		{named, "", filepath.Join(root, "sub", "deeper"), "sub/deeper"},
		{named, "", filepath.Join(root, "in"), "sub"},
		{named, "", root, ""},
		{named, "sub", filepath.Join(root, "sub", "deeper"), "sub"},
		{named, "", filepath.Join(root, "out"), ""},
		{named, "", outside, ""},
		{named, "", "sub", ""},
		{temp, "", filepath.Join(root, "sub"), ""},
		{temp, "x", "", "x"},
	} {
		if got := CallerCwd(p, tc.rule, tc.cwd, tc.caller); got != tc.want {
			t.Errorf("CallerCwd(%s, %q, %q) = %q, want %q", tc.rule.Name, tc.cwd, tc.caller, got, tc.want)
		}
	}
}
