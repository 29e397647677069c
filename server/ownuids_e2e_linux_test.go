package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// Per-user kernel limits never couple two commands of a root server, nor
// a command and the server: each command runs as a uid of its own, which
// also owns the user namespace bubblewrap makes (the kernel counts a
// namespace's inotify instances, and more, against its owner). One command
// holding every inotify instance its uid may have leaves another its own,
// and root (the server) its own. An unprivileged server's commands share
// its uid and these limits (docs/sandbox.md says so).
func TestContainmentRootServerOwnUIDs(t *testing.T) {
	requireBwrap(t)
	dir := t.TempDir()
	testserver.SandboxWorkspace(t, dir)
	probe := filepath.Join(dir, buildProbe(t, dir))
	in := testserver.Start(t, testserver.Options{Policy: fmt.Sprintf(`version: 1
limits: {concurrency: 4, per_principal: 4}
roles: {operator: {permissions: [exec, lockout], commands: ["*"]}}
commands:
  - {name: probe, binary: %s, args: ["**"], timeout: 5m}
`, probe)})
	data, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Fatal(err)
	}
	limit, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{probe, "inotify", strconv.Itoa(limit), "10m"}})
	if err != nil {
		t.Fatal(err)
	}
	var held string
	for !strings.Contains(held, "\n") {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("the holder: %v (%q)", err, held)
		}
		held += string(m.GetOutput().GetData())
	}
	got := func(out string) int {
		var n, of int
		fmt.Sscanf(out, "inotify %d of %d", &n, &of)
		return n
	}
	r := execArgv(t, in, probe, "inotify", "10")
	own, ownErr := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if ownErr == nil {
		syscall.Close(own)
	}
	if os.Geteuid() != 0 {
		// Shared: the holder's instances are the server's user's.
		t.Logf("an unprivileged server: the holder got %d of %d, the other %q, the server's own: %v", got(held), limit, r.stdout, ownErr)
		return
	}
	if got(held) != limit {
		t.Errorf("the holder got %d of its %d inotify instances: something else of its uid had them", got(held), limit)
	}
	if r.err != nil || got(r.stdout) != 10 {
		t.Errorf("another command, while the holder has its uid's every inotify instance: %q %v", r.stdout, r.err)
	}
	if ownErr != nil {
		t.Errorf("the server's own inotify_init, while a command holds its uid's every instance: %v", ownErr)
	}
	cancel()
}
