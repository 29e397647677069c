package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/etcdtest"
)

// One name, one host: a second `coily serve` started with the name a
// live one holds is refused, told who holds it and how to fix it; the
// first one killed (its claim's lease still alive) starts again on its
// state directory at once, taking its own claim over; stopped, it frees
// the name for another.
func TestServeOneNameOneHost(t *testing.T) {
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	f := writeEtcdFiles(t, c)
	flags := []string{"--state", stateURL(c, "team"), "--etcd-ca", f.ca, "--etcd-cert", f.cert, "--etcd-key", f.key,
		"--state-seal-key", f.seal, "--host-name", "web-1"}
	pol := examplePolicy(t)
	a := startServe(t, shortDir(t), pol, flags...)

	other := shortDir(t)
	// Bounded: a second server that is not refused serves on.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, coilyBin, append([]string{"serve", "--state-dir", other, "--policy", pol}, flags...)...)
	out, err := second.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "hosts/web-1 is held") || !strings.Contains(string(out), "--host-name") {
		t.Fatalf("a second server named web-1: %v (ctx %v)\n%s", err, ctx.Err(), out)
	}

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	a = startServe(t, a.dir, pol, flags...)
	a.stop()
	startServe(t, other, pol, flags...)
}
