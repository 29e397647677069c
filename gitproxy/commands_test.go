package gitproxy

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A ref name holding a newline would hand git's hook two update lines
// for one command, the second the agent's own: the push is refused
// before git reads it, and upstream is unchanged.
func TestPushRefNameInjectionRefused(t *testing.T) {
	e := newEnv(t, "")
	e.seed("owner/app")
	work := filepath.Join(t.TempDir(), "w")
	e.git("", "clone", "--quiet", e.url("owner/app"), work)
	head := e.commit(work, "a", "agent work")
	cmd := gitCmd(work, "pack-objects", "--stdout", "--revs", "--quiet")
	cmd.Stdin = strings.NewReader(head + "\n^origin/main\n")
	pack, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	zero := strings.Repeat("0", 40)
	for _, c := range []struct{ name, refs string }{
		{"newline", "refs/heads/agent/a\n" + zero + " " + head + " refs/heads/agent/b"},
		{"carriage return", "refs/heads/agent/a\r"},
		{"tab", "refs/heads/agent/a\tb"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := pkt(zero+" "+head+" "+c.refs+"\x00report-status") + "0000" + string(pack)
			resp, err := http.Post(e.url("owner/app")+"/git-receive-pack", "application/x-git-receive-pack-request", bytes.NewReader([]byte(body)))
			if err != nil {
				t.Fatal(err)
			}
			out := readAll(resp)
			resp.Body.Close()
			for _, ref := range []string{"refs/heads/agent/a", "refs/heads/agent/b"} {
				if got := e.up.Ref(t, "owner/app", ref); got != "" {
					t.Fatalf("upstream's %s is %s: %d %q", ref, got, resp.StatusCode, out)
				}
			}
		})
	}
}

var commandCases = []struct {
	name, body string
	ok         bool
}{
	{"one command", pkt(strings.Repeat("0", 40)+" "+strings.Repeat("1", 40)+" refs/heads/x\x00report-status\n") + "0000PACK", true},
	{"two commands", pkt("a b refs/heads/x\x00caps") + pkt("a b refs/heads/y\n") + "0000", true},
	{"only a flush", "0000", true},
	{"upper-case hex", "000AABCDEF0000", true},
	{"newline inside", pkt("a b refs/heads/x\nc d refs/heads/y\x00caps") + "0000", false},
	{"newline inside a later line", pkt("a b refs/heads/x\x00caps") + pkt("a b refs/heads/y\n\n") + "0000", false},
	{"newline after the NUL", pkt("a b refs/heads/x\x00caps\nmore") + "0000", true},
	{"no flush", pkt("a b refs/heads/x"), false},
	{"short line", pkt("a b refs/heads/x")[:10], false},
	{"not hex", "00zz" + "0000", false},
	{"signed length", "+00a" + "0000", false},
	{"delimiter", "0001" + "0000", false},
	{"empty line", "0004" + "0000", false},
	{"empty", "", false},
	{"too many lines", strings.Repeat(pkt("a b refs/heads/x\n"), maxUpdates+maxCertLines+1) + "0000", false},
}

func TestReadCommands(t *testing.T) {
	for _, c := range commandCases {
		t.Run(c.name, func(t *testing.T) {
			r, err := checkCommands(strings.NewReader(c.body), io.Discard)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok %v", err, c.ok)
			}
			if err != nil {
				return
			}
			var b bytes.Buffer
			b.ReadFrom(r)
			if b.String() != c.body {
				t.Fatalf("body %q, want it whole: %q", b.String(), c.body)
			}
		})
	}
}

// FuzzReadCommands: whatever the body, the command list read is a prefix
// of it, and no line of it holds a newline before its end.
func FuzzReadCommands(f *testing.F) {
	for _, c := range commandCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		head, err := readCommands(bytes.NewReader(body))
		if err != nil {
			return
		}
		if !bytes.HasPrefix(body, head) || !bytes.HasSuffix(head, []byte("0000")) {
			t.Fatalf("head %q is not a prefix of %q ending in a flush", head, body)
		}
		for rest := head; len(rest) > 4; {
			n, _ := strconv.ParseUint(string(rest[:4]), 16, 16)
			text, _, _ := bytes.Cut(rest[4:n], []byte{0})
			if i := bytes.IndexByte(text, '\n'); i >= 0 && i != len(text)-1 {
				t.Fatalf("line %q passed", text)
			}
			rest = rest[n:]
		}
	})
}
