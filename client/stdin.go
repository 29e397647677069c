package client

import (
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// StdinWait is how long `--stdin=auto` waits for standard input to have
// something to read before sending none.
const StdinWait = 50 * time.Millisecond

// StdinState is what `--stdin=auto` looks at.
type StdinState int

// What standard input is.
const (
	StdinNotFile  StdinState = iota // not an open file (a test's reader): not sent
	StdinTerminal                   // a person types there: not sent
	StdinReady                      // data or its end to read within StdinWait: sent
	StdinIdle                       // a pipe (or the like) with nothing to read within StdinWait: not sent, with a notice
)

// LookAtStdin says what r is, waiting up to StdinWait for something to
// read.
func LookAtStdin(r io.Reader) StdinState {
	f, ok := r.(*os.File)
	switch {
	case !ok:
		return StdinNotFile
	case term.IsTerminal(int(f.Fd())):
		return StdinTerminal
	case readable(f, StdinWait):
		return StdinReady
	}
	return StdinIdle
}
