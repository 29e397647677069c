package server_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/testserver"
)

// readPids reads the pids a test command wrote, one per line, waiting until
// the file is complete.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	testserver.Poll(t, 5*time.Second, "pid file "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return false
			}
			pids = append(pids, n)
		}
		return len(pids) >= 2
	})
	return pids
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	testserver.Poll(t, within, "processes to exit", func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
