package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/workspace"
)

// `coily workspace check` lists the refused workspaces and, for one, why
// and whether its next scan passes; `coily workspace repair NAME` lifts
// the refusal once that scan passes, leaving the repair for the server to
// audit.
func TestCLIWorkspaceRepair(t *testing.T) {
	dir := shortDir(t)
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(filepath.Join(ws, "deep"+strings.Repeat("/d", 70)), 0o755); err != nil {
		t.Fatal(err)
	}
	w := workspace.Refused{Workspace: "ws", Root: ws, Request: "req-1", Since: time.Now(), Reasons: []string{"scan ws: something"}}
	if err := workspace.Refuse(dir, w); err != nil {
		t.Fatal(err)
	}
	if r := runCoily(t, nil, "workspace", "check", "--state-dir", dir); r.code != 1 || !strings.Contains(r.stdout, "workspace ws") {
		t.Fatalf("check: %+v", r)
	}
	r := runCoily(t, nil, "workspace", "check", "ws", "--state-dir", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "something") || !strings.Contains(r.stdout, "too deep") {
		t.Fatalf("check ws, too deep: %+v", r)
	}
	if r := runCoily(t, nil, "workspace", "repair", "ws", "--state-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "too deep") {
		t.Fatalf("repair while the scan fails: %+v", r)
	}
	if err := os.RemoveAll(filepath.Join(ws, "deep")); err != nil {
		t.Fatal(err)
	}
	if r := runCoily(t, nil, "workspace", "check", "ws", "--state-dir", dir); r.code != 0 || !strings.Contains(r.stdout, "next scan passes") {
		t.Fatalf("check ws: %+v", r)
	}
	if r := runCoily(t, nil, "workspace", "repair", "ws", "--state-dir", dir); r.code != 0 {
		t.Fatalf("repair: %+v", r)
	}
	if left, err := workspace.ListRefused(dir); err != nil || len(left) != 0 {
		t.Fatalf("still refused: %+v %v", left, err)
	}
	if r := runCoily(t, nil, "workspace", "repair", "ws", "--state-dir", dir); r.code != 1 {
		t.Fatalf("repair of a workspace not refused: %+v", r)
	}
}
