package procs

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		stat, state, session string
		ok                   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1", "S", "42", true},
		{"42 (a) Z (b) R 1 7 9 0", "R", "9", true}, // comm "a) Z (b"
		{"42 (zombie) Z 1 42 42", "Z", "42", true},
		{"42 (x) S 1", "", "", false},
		{"42 no parenthesis S 1 2 3", "", "", false},
		{"", "", "", false},
	} {
		state, session, ok := parseStat(tc.stat)
		if state != tc.state || session != tc.session || ok != tc.ok {
			t.Errorf("parseStat(%q) = %q, %q, %v", tc.stat, state, session, ok)
		}
	}
}

func TestLiveFindsAChild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc here")
	}
	marker := "3000." + strconv.Itoa(os.Getpid())
	cmd := exec.Command("sleep", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mine := func(p Proc) bool { return strings.Contains(p.Cmdline, "\x00"+marker+"\x00") }
	if got := Live(mine); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("Live found %v, want [%d]", got, cmd.Process.Pid)
	}
	self := Live(func(p Proc) bool { return p.PID == os.Getpid() })
	if len(self) != 1 {
		t.Errorf("Live does not find the test itself: %v", self)
	}
	_ = cmd.Process.Kill()
	// Killed and not yet waited for, it is a zombie: not live.
	poll.Until(t, 10*time.Second, "the killed child to be no longer live", func() bool { return len(Live(mine)) == 0 })
	_ = cmd.Wait()
}
