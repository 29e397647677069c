package sandbox

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The ssh agent's socket is bound by descriptor at SSHAgentPath in
// proxied mode, and only when it is a socket.
func TestProxiedMountsSSHAgent(t *testing.T) {
	dir := t.TempDir()
	bridge := filepath.Join(dir, "coily")
	if err := os.WriteFile(bridge, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	listen := func(name string) string {
		path := filepath.Join(dir, name)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return path
	}
	b := Bwrap{Bridge: bridge}
	p := Profile{Dir: "/w", Home: "/h", Network: NetworkProxied, ProxySocket: listen("proxy.sock"), SSHAgent: listen("agent.sock")}
	if err := p.Validate(); err != nil {
		t.Fatalf("base profile refused: %v", err)
	}
	c := &Confinement{}
	defer c.Close()
	mounts, err := b.proxiedMounts(&p, c)
	if err != nil || !slices.ContainsFunc(mounts, func(m mount) bool {
		return m.op == "--bind-fd" && m.dst == SSHAgentPath && m.file != nil && m.file.Name() == p.SSHAgent
	}) {
		t.Errorf("agent socket not bound by descriptor at %s: %+v, %v", SSHAgentPath, mounts, err)
	}
	notSocket := p
	notSocket.SSHAgent = bridge
	if _, err := b.proxiedMounts(&notSocket, c); err == nil {
		t.Error("a regular file was bound as the ssh agent's socket")
	}
}
