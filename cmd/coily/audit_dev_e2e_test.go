//go:build coilydev

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/audit"
)

// TestCLIAuditHonoursCOILYDEV: with COILY_DEV naming coily dev's state
// directory (what DIR/env exports), the audit commands read its log; a
// state directory given by flag or COILY_STATE_DIR still wins.
func TestCLIAuditHonoursCOILYDEV(t *testing.T) {
	devDir, _, recs := writeAuditLog(t, approvedRequest...)
	other, _, _ := writeAuditLog(t, audit.Record{Event: "exec.decision", Principal: "tag:elsewhere", Decision: "allow"})
	noState := "COILY_STATE_DIR=" + filepath.Join(t.TempDir(), "none") // the test's own default is no state dir
	dev := "COILY_DEV=" + devDir
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{dev}, []string{"audit", "tail"}, "approval.request"},
		{[]string{dev}, []string{"audit", "show", showApproval}, "exec.result"},
		{[]string{dev}, []string{"audit", "show", recs[0].ID}, "another"},
		{[]string{dev}, []string{"audit", "verify"}, "audit log OK: 5 records"},
		{[]string{dev, "COILY_STATE_DIR=" + other}, []string{"audit", "tail"}, "tag:elsewhere"},
		{[]string{dev}, []string{"audit", "tail", "--state-dir", other}, "tag:elsewhere"},
	} {
		env := tc.env
		if len(env) == 1 && !strings.Contains(strings.Join(tc.args, " "), "--state-dir") {
			r := runCoilyEnv(t, []string{noState}, tc.args...)
			if r.code == 0 && strings.Contains(r.stdout, tc.want) {
				t.Fatalf("%v without COILY_DEV found the dev log: %+v", tc.args, r)
			}
		}
		r := runCoilyEnv(t, env, tc.args...)
		if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v %v: want %q: %+v", env, tc.args, tc.want, r)
		}
	}
}

// runCoilyEnv runs the coily binary with env added to the test's own.
func runCoilyEnv(t *testing.T, env []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(coilyBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
}
