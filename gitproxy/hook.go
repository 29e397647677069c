package gitproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"coily.dev/coily/refusal"
)

// The pre-receive hook talks to the proxy through two FIFOs in the push's
// private directory: it opens "answer" for reading, writes the quarantine
// path, the ref updates git gave it and a "." line to "updates", then
// reads the answer up to its "." line: lines starting "say " before the
// status line (a push waiting for an approval says so) and the lines
// after it go to its standard error (git shows them as "remote: …"), and
// it exits 0 only when the status is "ok". The proxy opens both FIFOs read-write and
// non-blocking before git starts, so neither side's open blocks, and
// keeps them open until git has exited: an answer written before the hook
// runs waits in the FIFO for it, and the hook never waits on an EOF. The
// proxy answers every push, whether or not it could read the hook's
// request, and drains whatever the hook writes after what it read, so a
// hook always ends (hookPipes.read, reply). A FIFO, not a socket, because
// the hook is then plain /bin/sh: no coily binary on the push's path, and
// no other process (the updates are copied by the shell's own read).
const hookScript = `#!/bin/sh
exec 3<'%[1]s/answer' || exit 1
{ printf '%%s\n' "$GIT_QUARANTINE_PATH"; while IFS= read -r l || [ -n "$l" ]; do printf '%%s\n' "$l"; done; printf '.\n'; } >'%[1]s/updates' || exit 1
while :; do
	IFS= read -r status <&3 || exit 1
	case $status in "say "*) printf '%%s\n' "${status#say }" >&2 ;; *) break ;; esac
done
while IFS= read -r line <&3 && [ "$line" != . ]; do printf '%%s\n' "$line" >&2; done
[ "$status" = ok ]
`

// Bounds of what the hook hands over.
const (
	maxUpdates  = 256
	maxHookLine = 4096
	// hookDeadline runs from the push's start: past Limits.ReadTimeout,
	// by which the body has come, and git's checks of it after.
	hookDeadline = 25 * time.Minute
)

// hookPipes are the proxy's ends of the two FIFOs.
type hookPipes struct {
	updates, answer *os.File
}

// openHook makes the FIFOs and the hook in dir (the push's private
// directory, holding the repository "repo.git").
func openHook(dir string) (*hookPipes, error) {
	hooks := filepath.Join(dir, "hooks")
	if err := os.Mkdir(hooks, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(hooks, "pre-receive"), fmt.Appendf(nil, hookScript, dir), 0o700); err != nil {
		return nil, err
	}
	h := &hookPipes{}
	for _, f := range []struct {
		name string
		to   **os.File
	}{{"updates", &h.updates}, {"answer", &h.answer}} {
		path := filepath.Join(dir, f.name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			h.close()
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
		fd, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
		if err != nil {
			h.close()
			return nil, err
		}
		*f.to = fd
	}
	return h, nil
}

func (h *hookPipes) close() {
	for _, f := range []*os.File{h.updates, h.answer} {
		if f != nil {
			f.Close()
		}
	}
}

// read waits for the hook's request: the quarantine path and the update
// lines, until ctx ends. A request the proxy cannot read whole (too many
// updates, a line too long) is a refusal of its own. Whatever the hook
// writes after is drained until close, so that it never blocks on a full
// FIFO.
func (h *hookPipes) read(ctx context.Context) (string, []string, error) {
	stop := context.AfterFunc(ctx, func() { h.updates.SetReadDeadline(time.Now()) })
	defer func() {
		stop()
		h.updates.SetReadDeadline(time.Time{})
		go io.Copy(io.Discard, h.updates) // ends when close closes the FIFO
	}()
	h.updates.SetReadDeadline(time.Now().Add(hookDeadline))
	sc := bufio.NewScanner(h.updates)
	sc.Buffer(make([]byte, 0, maxHookLine), maxHookLine)
	sc.Split(splitLines)
	var lines []string
	for sc.Scan() {
		line := sc.Text()
		if line == "." {
			if len(lines) < 2 {
				return "", nil, fmt.Errorf("the hook handed over no update")
			}
			return lines[0], lines[1:], nil
		}
		if len(lines) > maxUpdates {
			return "", nil, refusal.New(refusal.BadRequest, "more than %d ref updates in one push", maxUpdates)
		}
		lines = append(lines, line)
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return "", nil, refusal.New(refusal.BadRequest, "a ref update longer than %d bytes", maxHookLine)
	}
	if err := sc.Err(); err != nil {
		return "", nil, err
	}
	return "", nil, fmt.Errorf("the hook's request ended early")
}

// splitLines splits at each newline, and only there: a carriage return
// stays in its line (bufio.ScanLines drops one before a newline, which
// would make "refs/heads/x\r", a ref git refuses, read as refs/heads/x).
func splitLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// say sends the hook a line it shows the agent now, before the answer
// (git shows it as "remote: …" as it comes).
func (h *hookPipes) say(line string) {
	h.answer.SetWriteDeadline(time.Now().Add(10 * time.Second))
	h.answer.WriteString("say " + oneLine(line) + "\n")
}

// reply answers the hook: ok or not, the lines git shows the agent, and
// the "." that ends the answer. The FIFO stays open (close closes it), so
// an answer written before the hook runs is still there when it does.
func (h *hookPipes) reply(ok bool, lines []string) {
	status := "refused"
	if ok {
		status = "ok"
	}
	var b strings.Builder
	b.WriteString(status + "\n")
	for _, l := range lines {
		if l = oneLine(l); l != "." {
			b.WriteString(l + "\n")
		}
	}
	b.WriteString(".\n")
	h.answer.SetWriteDeadline(time.Now().Add(10 * time.Second))
	h.answer.WriteString(b.String())
}
