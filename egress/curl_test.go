package egress

import (
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curl speaks to the proxy over its loopback TCP listener (curl's proxy
// must be TCP); the same Proxy serves the unix socket.
func TestProxyWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	plain, tlsSrv := helloServers(t)
	hp, sp := portOf(t, plain.URL), portOf(t, tlsSrv.URL)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	res := newResolver("example.com", "127.0.0.1", "www.example.com", "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res}, []string{"example.com:" + hp, "example.com:" + sp}, loopback)
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		base := []string{"-sS", "--noproxy", "", "--proxy", "http://" + tp.tcp, "--cacert", ca}
		cmd := exec.CommandContext(ctx, curl, append(base, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"http://example.com:" + hp + "/"}, 0, payload + " example.com:" + hp},
		{[]string{"https://example.com:" + sp + "/"}, 0, payload + " example.com:" + sp},
		// Plain HTTP: curl prints the proxy's 403 body.
		{[]string{"http://www.example.com:" + hp + "/"}, 0, `coily: host www.example.com:` + hp + ` is not in the egress allowlist of rule "gh"; ask the owner to add it`},
		// CONNECT: curl reports the refused tunnel.
		{[]string{"https://www.example.com:" + sp + "/"}, 56, "403"},
		{[]string{"https://127.0.0.1:" + sp + "/", "--insecure"}, 0, payload},
	}
	for _, tc := range cases {
		out, code := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("curl %v: exit %d %q; want exit %d containing %q", tc.args, code, out, tc.code, tc.out)
		}
	}
	// Without the loopback CIDR the same literal is refused.
	tp2 := startProxy(t, Config{Resolver: res}, []string{"example.com:" + sp}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, curl, "-sS", "--noproxy", "", "--proxy", "http://"+tp2.tcp, "--cacert", ca,
		"https://example.com:"+sp+"/").CombinedOutput()
	if !strings.Contains(string(out), "403") {
		t.Errorf("curl through a proxy without the loopback CIDR: %q, want a 403", out)
	}
}
