package server

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

// errTimeout is the cancellation cause of a command that ran out of time.
var errTimeout = errors.New("command timed out")

type chunk struct {
	stream coilyv1.Stream
	data   []byte
}

// runResult is how a command ended.
type runResult struct {
	exitCode  int
	signal    int
	duration  time.Duration
	truncated [3]bool // indexed by coilyv1.Stream
	// report is what the sandbox observed (quarantined entries, limits).
	report sandbox.Report
}

// runCommand starts cmd in its own process group, opens its sandbox's start
// gate, feeds it stdin, forwards its output through emit as produced (each
// stream capped at maxOut bytes), and waits for it. The process group and
// sandbox are killed when ctx ends (a timeout reads as command-timeout),
// when emit fails (the caller went away), and after the command exits (so
// no stray child outlives the request). id names what the sandbox
// quarantines.
func runCommand(ctx context.Context, j *stops.Job, cmd *exec.Cmd, conf *sandbox.Confinement, id string, stdin []byte, maxOut int64, emit func(chunk) error) (runResult, error) {
	var res runResult
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

	chunks := make(chan chunk, 16)
	readers := make(chan struct{}, 2)
	var errHead []byte // the start of stderr, to explain a sandbox set-up failure
	go readStream(outR, coilyv1.Stream_STREAM_STDOUT, maxOut, chunks, readers, &res.truncated, nil)
	go readStream(errR, coilyv1.Stream_STREAM_STDERR, maxOut, chunks, readers, &res.truncated, &errHead)
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
			res.duration = time.Since(start)
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
			if errors.Is(context.Cause(ctx), errTimeout) {
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
	res.report = conf.Finish(id)
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
func finish(j *stops.Job, cmd *exec.Cmd, res runResult, waitErr, emitErr error) (runResult, error) {
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
		res.exitCode, res.signal = -1, int(ws.Signal())
	default:
		res.exitCode = st.ExitCode()
	}
	return res, nil
}

// readStream forwards r in chunks until EOF or error, dropping (but still
// draining) bytes beyond maxOut.
func readStream(r *os.File, s coilyv1.Stream, maxOut int64, out chan<- chunk, done chan<- struct{}, truncated *[3]bool, head *[]byte) {
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
				out <- chunk{stream: s, data: bytes.Clone(buf[:keep])}
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
