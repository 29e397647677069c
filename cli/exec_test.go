package cli

import (
	"strings"
	"testing"
)

// --stdin decides from the mode, and for auto from what standard input
// is: sent when it has data or its end to read, not sent from a terminal
// or an idle pipe (then with a notice), and a mode it does not know is a
// usage error that does not even look at standard input.
func TestStdinDecision(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		state  stdinState
		send   bool
		notice bool
		err    bool
	}{
		{"auto", stdinNotFile, false, false, false},
		{"auto", stdinTerminal, false, false, false},
		{"auto", stdinReady, true, false, false},
		{"auto", stdinIdle, false, true, false},
		{"AUTO", stdinReady, true, false, false},
		{"true", stdinIdle, true, false, false},
		{"1", stdinTerminal, true, false, false},
		{"yes", stdinNotFile, true, false, false},
		{"false", stdinReady, false, false, false},
		{"0", stdinIdle, false, false, false},
		{"no", stdinReady, false, false, false},
		{"", stdinIdle, false, false, false},
		{"sometimes", stdinReady, false, false, true},
		{"auto\n", stdinReady, false, false, true},
		{"truee", stdinReady, false, false, true},
	} {
		looked := false
		state := func() stdinState { looked = true; return tc.state }
		send, notice, err := stdinDecision(tc.mode, state)
		if send != tc.send || notice != tc.notice || (err != nil) != tc.err {
			t.Errorf("%q with %v: send %v notice %v err %v; want %v %v error %v", tc.mode, tc.state, send, notice, err, tc.send, tc.notice, tc.err)
		}
		if looked && !strings.EqualFold(tc.mode, stdinAuto) {
			t.Errorf("%q: looked at standard input", tc.mode)
		}
	}
}
