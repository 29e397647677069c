package cli

import (
	"coily.dev/coily/client"
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
		state  client.StdinState
		send   bool
		notice bool
		err    bool
	}{
		{"auto", client.StdinNotFile, false, false, false},
		{"auto", client.StdinTerminal, false, false, false},
		{"auto", client.StdinReady, true, false, false},
		{"auto", client.StdinIdle, false, true, false},
		{"AUTO", client.StdinReady, true, false, false},
		{"true", client.StdinIdle, true, false, false},
		{"1", client.StdinTerminal, true, false, false},
		{"yes", client.StdinNotFile, true, false, false},
		{"false", client.StdinReady, false, false, false},
		{"0", client.StdinIdle, false, false, false},
		{"no", client.StdinReady, false, false, false},
		{"", client.StdinIdle, false, false, false},
		{"sometimes", client.StdinReady, false, false, true},
		{"auto\n", client.StdinReady, false, false, true},
		{"truee", client.StdinReady, false, false, true},
	} {
		looked := false
		state := func() client.StdinState { looked = true; return tc.state }
		send, notice, err := stdinDecision(tc.mode, state)
		if send != tc.send || notice != tc.notice || (err != nil) != tc.err {
			t.Errorf("%q with %v: send %v notice %v err %v; want %v %v error %v", tc.mode, tc.state, send, notice, err, tc.send, tc.notice, tc.err)
		}
		if looked && !strings.EqualFold(tc.mode, stdinAuto) {
			t.Errorf("%q: looked at standard input", tc.mode)
		}
	}
}
