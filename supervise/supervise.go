// Package supervise runs a rule's command, wrapped in its sandbox, to its
// end: it starts it in a process group of its own, opens the sandbox's
// start gate, feeds it stdin, forwards its output as produced (capped, and
// scrubbed of the execution's secrets by Output), and turns how it ended
// into a result or a refusal. It also settles who sandboxes run as on the
// host (a server running as root never runs one as root) and the sandbox
// backends a server offers.
//
// Invariants:
//   - the command's process group and sandbox are killed when its context
//     ends, when its output cannot be delivered, and once it has exited: no
//     stray child outlives the request;
//   - a job stopped before its process exists never runs (stops.Job);
//   - no byte of an injected credential reaches the caller through the
//     output or a refusal quoting it (Output, ScrubRefusal).
package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/stops"
)

// chunkSize is the largest output chunk forwarded in one message.
const chunkSize = 32 << 10

// errHeadSize is how much of stderr is kept to explain a sandbox failure.
const errHeadSize = 4 << 10

// drainAfterExit bounds how long output is still read after the command
// exited and its process group was killed (a process that left the group
// could otherwise hold the pipes open forever).
const drainAfterExit = 2 * time.Second

// ErrTimeout is the cancellation cause of a command that ran out of time:
// a context ended with it reads as command-timeout.
var ErrTimeout = errors.New("command timed out")

// Chunk is a piece of one of the command's output streams.
type Chunk struct {
	Stream coilyv1.Stream
	Data   []byte
}

// Result is how a command ended.
type Result struct {
	ExitCode  int
	Signal    int
	Duration  time.Duration
	Truncated [3]bool // indexed by coilyv1.Stream
	// Report is what the sandbox observed (quarantined entries, limits).
	Report sandbox.Report
}

// Run starts cmd in its own process group, opens its sandbox's start
// gate, feeds it stdin, forwards its output through emit as produced (each
// stream capped at maxOut bytes), and waits for it. The process group and
// sandbox are killed when ctx ends (a timeout reads as command-timeout),
// when emit fails (the caller went away), and after the command exits (so
// no stray child outlives the request). id names what the sandbox
// quarantines.
func Run(ctx context.Context, j *stops.Job, cmd *exec.Cmd, conf *sandbox.Confinement, id string, stdin []byte, maxOut int64, emit func(Chunk) error) (Result, error) {
	var res Result
	outR, outW, err := os.Pipe()
	if err != nil {
		return res, fmt.Errorf("stdout pipe: %w", err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return res, fmt.Errorf("stderr pipe: %w", err)
	}
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	if len(stdin) > 0 {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.WaitDelay = drainAfterExit
	setProcessGroup(cmd)

	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	conf.AfterStart()
	if err != nil {
		return res, refusal.Wrap(refusal.Internal, err, "could not start %s", cmd.Path)
	}
	pgid := cmd.Process.Pid
	if !j.Started(pgid, conf) {
		_ = cmd.Wait()
		j.Finished()
		return res, refusal.New(j.StopReason(), "stopped before it started")
	}

	chunks := make(chan Chunk, 16)
	readers := make(chan struct{}, 2)
	var errHead []byte // the start of stderr, to explain a sandbox set-up failure
	go readStream(outR, coilyv1.Stream_STREAM_STDOUT, maxOut, chunks, readers, &res.Truncated, nil)
	go readStream(errR, coilyv1.Stream_STREAM_STDERR, maxOut, chunks, readers, &res.Truncated, &errHead)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The sandbox is bounded, then runs the command. If it cannot start,
	// it is killed and the reason read from bwrap once it has exited.
	startErr := conf.Start(ctx, cmd.Process)
	if startErr != nil {
		j.Signal(syscall.SIGKILL, "")
	}

	var waitErr error
	var emitErr error
	ctxDone := ctx.Done()
	for open, running := 2, true; open > 0 || running; {
		select {
		case c := <-chunks:
			if emitErr == nil {
				if emitErr = emit(c); emitErr != nil {
					j.Signal(syscall.SIGKILL, refusal.Internal)
				}
			}
		case <-readers:
			open--
		case waitErr = <-exited:
			running = false
			res.Duration = time.Since(start)
			// Kill whatever the command left behind in its group, then stop
			// waiting for output that a process outside the group may hold.
			j.Signal(syscall.SIGKILL, "")
			j.Finished()
			deadline := time.Now().Add(drainAfterExit)
			_ = outR.SetReadDeadline(deadline)
			_ = errR.SetReadDeadline(deadline)
		case <-ctxDone:
			ctxDone = nil
			why := refusal.Internal
			if errors.Is(context.Cause(ctx), ErrTimeout) {
				why = refusal.CommandTimeout
			}
			j.Signal(syscall.SIGKILL, why)
		}
	}
	// Each reader sent its chunks before signalling that it was done, but
	// the loop may have taken the signal first: forward what is buffered.
	for len(chunks) > 0 {
		if c := <-chunks; emitErr == nil {
			emitErr = emit(c)
		}
	}
	res.Report = conf.Finish(id)
	if j.StopReason() == "" {
		if err := conf.Setup(errHead); err != nil {
			return res, refusal.Wrap(refusal.SandboxUnavailable, err, "%v", err)
		}
		if startErr != nil {
			return res, refusal.Wrap(refusal.SandboxUnavailable, startErr, "%v", startErr)
		}
	}
	return finish(j, cmd, res, waitErr, emitErr)
}

// finish turns how the command ended into a result or a refusal.
func finish(j *stops.Job, cmd *exec.Cmd, res Result, waitErr, emitErr error) (Result, error) {
	switch why := j.StopReason(); why {
	case "":
	case refusal.CommandTimeout:
		return res, refusal.New(why, "command exceeded its timeout and was killed")
	case refusal.LockoutActive:
		return res, refusal.New(why, "lockout: command was killed")
	case refusal.CommandKilled:
		return res, refusal.New(why, "command was killed on request (the web console's kill)")
	default:
		if emitErr != nil {
			return res, refusal.Wrap(refusal.Internal, emitErr, "caller went away; command was killed")
		}
		return res, refusal.New(why, "command was stopped")
	}
	st := cmd.ProcessState
	if st == nil {
		return res, refusal.Wrap(refusal.Internal, waitErr, "command did not report an exit status")
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		res.ExitCode, res.Signal = -1, int(ws.Signal())
	default:
		res.ExitCode = st.ExitCode()
	}
	return res, nil
}

// readStream forwards r in chunks until EOF or error, dropping (but still
// draining) bytes beyond maxOut.
func readStream(r *os.File, s coilyv1.Stream, maxOut int64, out chan<- Chunk, done chan<- struct{}, truncated *[3]bool, head *[]byte) {
	defer func() { done <- struct{}{} }()
	var sent int64
	buf := make([]byte, chunkSize)
	for {
		n, err := r.Read(buf)
		if head != nil && len(*head) < errHeadSize && n > 0 {
			*head = append(*head, buf[:min(n, errHeadSize-len(*head))]...)
		}
		if n > 0 {
			keep := min(int64(n), max(0, maxOut-sent))
			if keep < int64(n) {
				truncated[s] = true
			}
			if keep > 0 {
				out <- Chunk{Stream: s, Data: bytes.Clone(buf[:keep])}
				sent += keep
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				truncated[s] = true
			}
			return
		}
	}
}
