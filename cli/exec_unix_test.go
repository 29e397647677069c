//go:build unix

package cli

import (
	"os"
	"strings"
	"testing"
)

// With --stdin=auto, a pipe with data or its end is sent without a word;
// an idle pipe is not sent, and one line on stderr says so.
func TestSendStdinAutoPipes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		feed   func(w *os.File)
		send   bool
		notice bool
	}{
		{"data", func(w *os.File) { w.WriteString("body\n") }, true, false},
		{"closed (end of input)", func(w *os.File) { w.Close() }, true, false},
		{"idle", func(*os.File) {}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			tc.feed(w)
			a, _, errb := testApp(nil)
			a.Stdin = r
			send, err := a.sendStdin(stdinAuto)
			if err != nil || send != tc.send {
				t.Fatalf("send %v, %v; want %v", send, err, tc.send)
			}
			notice := errb.String()
			if tc.notice != (notice != "") {
				t.Fatalf("stderr %q; want a notice: %v", notice, tc.notice)
			}
			if tc.notice && (strings.Count(notice, "\n") != 1 || !strings.HasPrefix(notice, "coily: standard input not sent") || !strings.Contains(notice, "--stdin=true")) {
				t.Fatalf("notice %q: want one line saying stdin was not sent and how to send it", notice)
			}
		})
	}
	// A regular file is always ready: sent.
	f, err := os.CreateTemp(t.TempDir(), "in")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _, errb := testApp(nil)
	a.Stdin = f
	if send, err := a.sendStdin(stdinAuto); !send || err != nil || errb.Len() != 0 {
		t.Fatalf("a file: send %v, %v, stderr %q; want it sent silently", send, err, errb)
	}
}
