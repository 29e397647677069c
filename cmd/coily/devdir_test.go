//go:build coilydev

package main

import (
	"coily.dev/coily/cli"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDefaultDevStateDir: coily dev's default is per user and never the
// production state directory, for root either.
func TestDefaultDevStateDir(t *testing.T) {
	me := os.Geteuid()
	runtime := t.TempDir() // owned by me
	tmp := "/tmp"
	for _, tt := range []struct {
		name       string
		euid       int
		runtimeDir string
		want       string
	}{
		{"runtime dir of mine", me, runtime, filepath.Join(runtime, "coily-dev")},
		{"root, no runtime dir", 0, "", "/tmp/coily-dev-0"},
		{"runtime dir of another user", me + 1, runtime, "/tmp/coily-dev-" + itoa(me+1)},
		{"relative runtime dir", me, "run/user", "/tmp/coily-dev-" + itoa(me)},
		{"missing runtime dir", me, filepath.Join(runtime, "missing"), "/tmp/coily-dev-" + itoa(me)},
		{"runtime dir is a file", me, writeFile(t, runtime, "file"), "/tmp/coily-dev-" + itoa(me)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := defaultDevStateDir(tt.euid, tt.runtimeDir, tmp)
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if isProductionStateDir(got) || strings.HasPrefix(got, "/var/lib") {
				t.Fatalf("%s is a production directory", got)
			}
		})
	}
}

func TestDevStateDirRefusesProduction(t *testing.T) {
	link := filepath.Join(t.TempDir(), "link")
	linked := os.Symlink(cli.ProductionStateDir, link) == nil
	for _, dir := range []string{cli.ProductionStateDir, cli.ProductionStateDir + "/", "/var/lib/../lib/coily", link} {
		if dir == link && (!linked || !exists(cli.ProductionStateDir)) {
			continue // a link is resolved only to a directory that exists
		}
		t.Setenv("COILY_STATE_DIR", dir)
		if got, err := devStateDir(&env{global: &cli.Globals{StateDir: dir}}); err == nil {
			t.Errorf("devStateDir(%s) = %s, want a refusal", dir, got)
		}
	}
	ok := filepath.Join(t.TempDir(), "dev")
	t.Setenv("COILY_STATE_DIR", ok)
	if got, err := devStateDir(&env{global: &cli.Globals{StateDir: ok}}); err != nil || got != ok {
		t.Fatalf("devStateDir(%s) = %s, %v", ok, got, err)
	}
}

func TestClaimDevDirRefusesPlanted(t *testing.T) {
	parent := t.TempDir()
	mine := filepath.Join(parent, "mine")
	if err := claimDevDir(mine, os.Geteuid()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(mine); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("claimed dir: %v %v", fi, err)
	}
	if err := claimDevDir(mine, os.Geteuid()); err != nil {
		t.Fatalf("claiming it again: %v", err)
	}
	link := filepath.Join(parent, "link")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	if err := claimDevDir(link, os.Geteuid()); err == nil {
		t.Error("a symbolic link was accepted")
	}
	if err := claimDevDir(writeFile(t, parent, "file"), os.Geteuid()); err == nil {
		t.Error("a file was accepted")
	}
	if err := claimDevDir(mine, os.Geteuid()+1); err == nil {
		t.Error("another user's directory was accepted")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeFile makes a regular file dir/name and returns its path.
func writeFile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }
