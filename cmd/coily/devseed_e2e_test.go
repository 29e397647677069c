//go:build coilydev

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/examples"
)

// TestCLIDevRestartKeepsUserFiles restarts `coily dev` after the user
// edited its policy and credentials: the restart keeps both and says so;
// --reset writes the demo ones again and says where the user's went.
func TestCLIDevRestartKeepsUserFiles(t *testing.T) {
	dir := shortDir(t)
	policy, creds := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "credentials")
	first := startDev(t, dir, "--state-dir", dir)
	waitLog(t, first.log, "policy "+policy+": the demo one, written")
	waitLog(t, first.log, "credentials "+creds+": the demo one, written")
	if code := first.stop(t); code != 0 {
		t.Fatalf("coily dev exited %d:\n%s", code, first.log)
	}
	mine := string(examples.DevPolicy) + "\n# the user's edit\n"
	if err := os.WriteFile(policy, []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	demoCreds, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	myCreds := string(demoCreds) + "mine=the-user's-own-secret\n"
	if err := os.WriteFile(creds, []byte(myCreds), 0o600); err != nil {
		t.Fatal(err)
	}

	second := startDev(t, dir, "--state-dir", dir)
	waitLog(t, second.log, "policy "+policy+": kept (yours")
	waitLog(t, second.log, "credentials "+creds+": kept (yours")
	for path, want := range map[string]string{policy: mine, creds: myCreds} {
		if got, _ := os.ReadFile(path); string(got) != want {
			t.Errorf("the restart replaced %s:\n%s", path, got)
		}
	}
	if code := second.stop(t); code != 0 {
		t.Fatalf("coily dev exited %d:\n%s", code, second.log)
	}

	third := startDev(t, dir, "--state-dir", dir, "--reset")
	waitLog(t, third.log, "policy "+policy+": replaced by the demo one (--reset); the one it replaced is "+policy+".old")
	waitLog(t, third.log, "credentials "+creds+": replaced by the demo one (--reset); the one it replaced is "+creds+".old")
	if got, _ := os.ReadFile(policy); string(got) != string(examples.DevPolicy) {
		t.Errorf("--reset left the policy:\n%s", got)
	}
	if got, _ := os.ReadFile(creds); strings.Contains(string(got), "mine=") || !strings.Contains(string(got), "demo=coily-demo-") {
		t.Errorf("--reset left the credentials")
	}
	for path, want := range map[string]string{policy + ".old": mine, creds + ".old": myCreds} {
		if got, _ := os.ReadFile(path); string(got) != want {
			t.Errorf("%s does not hold the user's file:\n%s", path, got)
		}
	}
	if strings.Contains(third.log.String(), "the-user's-own-secret") {
		t.Error("a secret of the credentials file is in the log")
	}
}
