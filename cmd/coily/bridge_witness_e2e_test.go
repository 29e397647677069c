package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/audit/witness"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testlog"
)

// bridgeWitnessPolicy lets the local operator run /bin/echo (records)
// and relay, which reads the log's checkpoints.
const bridgeWitnessPolicy = `version: 1
roles:
  operator:
    permissions: [status, relay, exec]
    commands: [echo]
    sandboxes: [demo]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
`

// bridgeWitnessHeld is the checkpoint the bridge's witness keeps on disk
// (its state file), checked against the log's key and the witness's.
func bridgeWitnessHeld(t *testing.T, wdir, origin, vkey, wkey string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wdir, witness.StateFile))
	if err != nil {
		return -1
	}
	var st struct{ Logs map[string]string }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	msg := []byte(st.Logs[origin])
	c, err := audit.OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatalf("the witness's state: %v\n%s", err, b)
	}
	if _, err := witness.Cosigned(msg, wkey); err != nil {
		t.Fatalf("the witness's state: %v", err)
	}
	return c.N
}

// TestCLIBridgeWitnessKeepsTheLogsCheckpoint: a real coily bridge with
// --witness-log pulls the real coily serve's checkpoints and keeps one
// that grows with the log; the log cut back (the server restarted on it)
// is refused with an ALARM in the bridge's log, and the witness keeps the
// larger checkpoint it held.
func TestCLIBridgeWitnessKeepsTheLogsCheckpoint(t *testing.T) {
	dir := shortDir(t)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(bridgeWitnessPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--checkpoint-every", "1s")
	p.run(t, "exec", "--", "/bin/echo", "one")
	vkey := strings.TrimSpace(runCoily(t, nil, "--state-dir", dir, "audit", "key").stdout)
	origin, _, _ := strings.Cut(vkey, "+")
	wdir := t.TempDir()
	wkey := strings.TrimSpace(runCoily(t, nil, "witness", "key", "--state", wdir).stdout)

	mount := shortDir(t)
	bridgeLog := new(testlog.Buffer)
	cmd := exec.Command(coilyBin, "--socket", p.socket, "bridge", "--mount", mount+"=demo",
		"--witness-log", vkey, "--witness-state", wdir, "--witness-every", "1s")
	cmd.Stdout, cmd.Stderr = bridgeLog, bridgeLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	held := func() int64 { return bridgeWitnessHeld(t, wdir, origin, vkey, wkey) }
	waitHeld := func(what string, ok func(n int64) bool) int64 {
		t.Helper()
		var n int64
		if !poll.Within(30*time.Second, func() bool { n = held(); return ok(n) }) {
			t.Fatalf("%s: the witness holds %d records\nbridge:\n%s\nserver:\n%s", what, n, bridgeLog, p.log)
		}
		return n
	}
	first := waitHeld("a first checkpoint", func(n int64) bool { return n > 0 })
	for _, w := range []string{"two", "three", "four"} {
		p.run(t, "exec", "--", "/bin/echo", w)
	}
	grown := waitHeld("the checkpoint grows with the log", func(n int64) bool { return n >= first+6 })
	if strings.Contains(bridgeLog.String(), "ALARM") {
		t.Fatalf("a false alarm:\n%s", bridgeLog)
	}

	// The log cut back below what the witness holds, the server started
	// again on it (locked out, its state file's head is later).
	p.stop()
	cutBack(t, dir, grown-3)
	p = startServe(t, dir, pol, "--checkpoint-every", "1s")
	poll.Until(t, 30*time.Second, "an ALARM in the bridge's log", func() bool {
		return strings.Contains(bridgeLog.String(), "ALARM") && strings.Contains(bridgeLog.String(), "were removed")
	})
	if n := held(); n < grown {
		t.Fatalf("the witness holds %d records after the refusal, less than the %d it kept", n, grown)
	}
	if !strings.Contains(bridgeLog.String(), "level=ERROR") {
		t.Fatalf("the alarm is not an error:\n%s", bridgeLog)
	}
}
