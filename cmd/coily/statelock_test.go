//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created by the lock
	first, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, stateLockFile)
	held, _ := os.ReadFile(lockPath)
	if strings.TrimSpace(string(held)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want our PID", held)
	}
	// A second holder (another open file description, as another process
	// would have) is refused at once, naming the directory and the PID.
	_, err = lockStateDir(dir)
	if !errors.Is(err, errStateDirBusy) {
		t.Fatalf("second lock: %v, want errStateDirBusy", err)
	}
	for _, want := range []string{dir, "PID " + strconv.Itoa(os.Getpid()), "--state-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if again, _ := os.ReadFile(lockPath); string(again) != string(held) {
		t.Errorf("the refused lock changed the lock file: %q, was %q", again, held)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	second.Close()
}

func TestLockStateDirRefusesPlantedFiles(t *testing.T) {
	for name, plant := range map[string]func(path, target string) error{
		"symlink":   func(path, target string) error { return os.Symlink(target, path) },
		"fifo":      func(path, _ string) error { return syscall.Mkfifo(path, 0o600) },
		"directory": func(path, _ string) error { return os.Mkdir(path, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := plant(filepath.Join(dir, stateLockFile), target); err != nil {
				t.Fatal(err)
			}
			l, err := lockStateDir(dir)
			if err == nil {
				l.Close()
				t.Fatal("a planted lock file was accepted")
			}
			if errors.Is(err, errStateDirBusy) {
				t.Fatalf("reported as busy: %v", err)
			}
			if data, _ := os.ReadFile(target); string(data) != "precious\n" {
				t.Fatalf("the symlink's target was changed: %q", data)
			}
		})
	}
}
