package cli

import (
	"strings"
	"testing"

	"coily.dev/coily/client/fastexec"
)

// --stdin decides from the mode, and for auto from what standard input
// is: sent when it has data or its end to read, not sent from a terminal
// or an idle pipe (then with a notice), and a mode it does not know is a
// usage error that does not even look at standard input.
func TestStdinDecision(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		state  fastexec.StdinState
		send   bool
		notice bool
		err    bool
	}{
		{"auto", fastexec.StdinNotFile, false, false, false},
		{"auto", fastexec.StdinTerminal, false, false, false},
		{"auto", fastexec.StdinReady, true, false, false},
		{"auto", fastexec.StdinIdle, false, true, false},
		{"AUTO", fastexec.StdinReady, true, false, false},
		{"true", fastexec.StdinIdle, true, false, false},
		{"1", fastexec.StdinTerminal, true, false, false},
		{"yes", fastexec.StdinNotFile, true, false, false},
		{"false", fastexec.StdinReady, false, false, false},
		{"0", fastexec.StdinIdle, false, false, false},
		{"no", fastexec.StdinReady, false, false, false},
		{"", fastexec.StdinIdle, false, false, false},
		{"sometimes", fastexec.StdinReady, false, false, true},
		{"auto\n", fastexec.StdinReady, false, false, true},
		{"truee", fastexec.StdinReady, false, false, true},
	} {
		looked := false
		state := func() fastexec.StdinState { looked = true; return tc.state }
		send, notice, err := stdinDecision(tc.mode, state)
		if send != tc.send || notice != tc.notice || (err != nil) != tc.err {
			t.Errorf("%q with %v: send %v notice %v err %v; want %v %v error %v", tc.mode, tc.state, send, notice, err, tc.send, tc.notice, tc.err)
		}
		if looked && !strings.EqualFold(tc.mode, stdinAuto) {
			t.Errorf("%q: looked at standard input", tc.mode)
		}
	}
}
