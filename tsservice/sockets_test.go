package tsservice_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// listeningSockets lists the inodes of this process's sockets that listen
// for TCP (state 0A in /proc/net/tcp and tcp6).
func listeningSockets(t *testing.T) []string {
	t.Helper()
	var listening []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" {
				listening = append(listening, fs[9])
			}
		}
	}
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		inode := strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")
		if slices.Contains(listening, inode) {
			mine = append(mine, inode)
		}
	}
	slices.Sort(mine)
	return mine
}
