package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
)

// TestVaultdev builds vaultdev, starts it and uses it as a client would
// use `vault server -dev`: KV v2 at secret/, AppRole enabled on demand.
func TestVaultdev(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vaultdev")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		root string
	}{
		{"core root token", nil, ""},
		{"fixed root token", []string{"-root-token", "root"}, "root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
			})
			line, err := bufio.NewReader(stdout).ReadString('\n')
			go func() { _, _ = io.Copy(io.Discard, stdout); done <- cmd.Wait() }()
			if err != nil {
				t.Fatalf("reading the address: %v; stderr: %s", err, stderr.String())
			}
			t.Logf("started in %s: %s", time.Since(start), strings.TrimSpace(line))
			var info struct {
				Addr      string `json:"addr"`
				RootToken string `json:"root_token"`
			}
			if err := json.Unmarshal([]byte(line), &info); err != nil {
				t.Fatalf("first line %q: %v", line, err)
			}
			if !strings.HasPrefix(info.Addr, "http://127.0.0.1:") || info.RootToken == "" {
				t.Fatalf("first line %q", line)
			}
			if tc.root != "" && info.RootToken != tc.root {
				t.Fatalf("root token %q, want %q", info.RootToken, tc.root)
			}

			c, err := api.NewClient(&api.Config{Address: info.Addr, MaxRetries: 0})
			if err != nil {
				t.Fatal(err)
			}
			c.ClearNamespace()
			c.SetToken(info.RootToken)
			ctx := context.Background()
			if _, err := c.KVv2("secret").Put(ctx, "coily/test", map[string]any{"k": "v"}); err != nil {
				t.Fatalf("KV v2 write: %v", err)
			}
			got, err := c.KVv2("secret").Get(ctx, "coily/test")
			if err != nil || got.Data["k"] != "v" {
				t.Fatalf("KV v2 read: %v, %v", got, err)
			}
			if err := c.Sys().EnableAuthWithOptions("approle", &api.EnableAuthOptions{Type: "approle"}); err != nil {
				t.Fatalf("enable approle: %v", err)
			}
			// The AWS secrets engine takes its STS and IAM endpoints
			// (a stand-in's, in coily's tests).
			if err := c.Sys().Mount("aws", &api.MountInput{Type: "aws"}); err != nil {
				t.Fatalf("mount aws: %v", err)
			}
			if _, err := c.Logical().Write("aws/config/root", map[string]any{"access_key": "AKIDX", "secret_key": "s",
				"region": "us-east-1", "sts_endpoint": "https://127.0.0.1:1", "iam_endpoint": "https://127.0.0.1:1"}); err != nil {
				t.Fatalf("aws/config/root: %v", err)
			}
			// leased-kv: reads carry renewable leases of the secret's ttl.
			if err := c.Sys().Mount("leased", &api.MountInput{Type: "leased-kv"}); err != nil {
				t.Fatalf("mount leased-kv: %v", err)
			}
			if _, err := c.Logical().Write("leased/x", map[string]any{"k": "v", "ttl": "1m"}); err != nil {
				t.Fatal(err)
			}
			if sec, err := c.Logical().Read("leased/x"); err != nil || sec.LeaseID == "" || !sec.Renewable || sec.LeaseDuration != 60 {
				t.Fatalf("leased-kv read: %+v, %v", sec, err)
			}
			if stderr.Len() > 0 {
				t.Errorf("not quiet: %s", stderr.String())
			}

			// Standard input's EOF stops it.
			stdin.Close()
			select {
			case err := <-done:
				done <- err
				if err != nil {
					t.Errorf("exit: %v; stderr: %s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still running 10s after its standard input closed")
			}
		})
	}
}
