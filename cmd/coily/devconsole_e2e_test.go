//go:build coilydev

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCLIDevConsole opens coily dev's web console as a local browser
// would: its loopback URL from the env file, identified on the dev
// tailnet as the dev owner, loudly dev-only; an agent's request waits for
// the owner's approval there and runs once approved; requests naming
// another host or coming from another origin are refused.
func TestCLIDevConsole(t *testing.T) {
	dir := shortDir(t)
	p := startDev(t, dir, "--state-dir", dir)
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^export COILY_DEV_CONSOLE='(http://127\.0\.0\.1:\d+/)'$`).FindSubmatch(env)
	if m == nil {
		t.Fatalf("env file has no console URL:\n%s", env)
	}
	base := strings.TrimSuffix(string(m[1]), "/")
	if !strings.Contains(p.log.String(), "DEV ONLY") || !strings.Contains(p.log.String(), string(m[1])) {
		t.Fatalf("the log does not announce the dev console loudly:\n%s", p.log)
	}
	call := func(method, path, origin string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(body, out); err != nil {
				t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, body)
			}
		}
		return resp.StatusCode
	}
	var st struct {
		Dev    bool `json:"dev"`
		Caller struct {
			Principal string `json:"principal"`
			Peer      string `json:"peer"`
		} `json:"caller"`
	}
	if code := call("GET", "/api/status", "", &st); code != 200 || !st.Dev || st.Caller.Principal != "tag:owner" ||
		!strings.HasPrefix(st.Caller.Peer, "coily-console") {
		t.Fatalf("status through the gateway: %d %+v", code, st)
	}
	req, _ := http.NewRequest("GET", base+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "NOT FOR PRODUCTION") {
		t.Fatalf("page: %d %s", resp.StatusCode, page)
	}

	// An agent's request waits; the owner approves it in the console.
	t.Setenv("COILY_DEV", dir)
	t.Setenv("COILY_DEV_AS", "agent")
	cmd := exec.Command(coilyBin, "exec", "--", "/bin/echo", "confirm", "from the agent")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Approvals []struct {
			ID        string `json:"id"`
			Requester string `json:"requester"`
		} `json:"approvals"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for call("GET", "/api/approvals", "", &list); len(list.Approvals) == 0; call("GET", "/api/approvals", "", &list) {
		if time.Now().After(deadline) {
			t.Fatal("no approval appeared")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if list.Approvals[0].Requester != "tag:agent" {
		t.Fatalf("approval: %+v", list.Approvals[0])
	}
	id := list.Approvals[0].ID
	if code := call("POST", "/api/approvals/"+id+"/approve", "http://evil.example", nil); code != 403 {
		t.Fatalf("cross-origin approve: %d", code)
	}
	if code := call("POST", "/api/approvals/"+id+"/approve", base, nil); code != 200 {
		t.Fatalf("same-origin approve: %d", code)
	}
	if err := cmd.Wait(); err != nil || out.String() != "confirm from the agent\n" {
		t.Fatalf("approved exec: %v %q", err, out.String())
	}

	// DNS rebinding: another name for the loopback address is refused.
	req, _ = http.NewRequest("GET", base+"/api/status", nil)
	req.Host = "attacker.example" + base[strings.LastIndex(base, ":"):]
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("rebound host: %d", resp.StatusCode)
	}
}
