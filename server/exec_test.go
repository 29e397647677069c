package server_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

type result struct {
	exit           *coilyv1.ExecExit
	stdout, stderr string
	err            error
}

func execArgv(t *testing.T, in *testserver.Instance, argv ...string) result {
	t.Helper()
	return execReq(t, in, &coilyv1.ExecRequest{Argv: argv})
}

func execReq(t *testing.T, in *testserver.Instance, req *coilyv1.ExecRequest) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	exit, err := in.Client.Exec(ctx, req, &out, &errb)
	return result{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

func wantCode(t *testing.T, err error, code refusal.Code) {
	t.Helper()
	var r *refusal.Error
	if !errors.As(err, &r) {
		t.Fatalf("error = %v, want refusal %s", err, code)
	}
	if r.Code != code {
		t.Fatalf("refusal = %s (%s), want %s", r.Code, r.Msg, code)
	}
}

func TestExecOutcomes(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	tests := []struct {
		name       string
		argv       []string
		wantExit   int32
		wantSignal int32
		wantOut    string
		wantErr    string
	}{
		{"echo", []string{"/bin/echo", "hi"}, 0, 0, "hi\n", ""},
		{"exit code", []string{"/bin/sh", "-c", "exit 7"}, 7, 0, "", ""},
		{"stderr", []string{"/bin/sh", "-c", "echo oops >&2; exit 1"}, 1, 0, "", "oops\n"},
		{"signal", []string{"/bin/sh", "-c", "kill -TERM $$"}, -1, 15, "", ""},
		{"no shell expansion", []string{"/bin/echo", "$HOME", "*"}, 0, 0, "$HOME *\n", ""},
		{"environment is rebuilt", []string{"/bin/sh", "-c", "echo ${COILY_TEST_LEAK:-clean}"}, 0, 0, "clean\n", ""},
	}
	t.Setenv("COILY_TEST_LEAK", "leaked")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := execArgv(t, in, tt.argv...)
			if r.err != nil {
				t.Fatalf("exec: %v", r.err)
			}
			if r.exit.GetExitCode() != tt.wantExit || r.exit.GetSignal() != tt.wantSignal {
				t.Errorf("exit = %d signal %d, want %d signal %d", r.exit.GetExitCode(), r.exit.GetSignal(), tt.wantExit, tt.wantSignal)
			}
			if r.stdout != tt.wantOut || r.stderr != tt.wantErr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tt.wantOut, tt.wantErr)
			}
		})
	}
}

func TestExecStdin(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	r := execReq(t, in, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat; cat"}, Stdin: []byte("line one\nline two\n")})
	if r.err != nil || r.stdout != "line one\nline two\n" {
		t.Fatalf("stdout %q err %v", r.stdout, r.err)
	}
}

func TestExecRefusals(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	r := execArgv(t, in, "/usr/bin/id")
	wantCode(t, r.err, refusal.PolicyDeny)
	if !strings.Contains(r.err.Error(), "no rule allows /usr/bin/id") {
		t.Errorf("reason missing: %v", r.err)
	}
}

// The output cap drops bytes beyond it, says so, and lets the command run
// to completion.
func TestExecOutputCap(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	// The sh rule caps each stream at 64 KiB; print 200 KiB then exit 3.
	r := execArgv(t, in, "/bin/sh", "-c", "head -c 204800 /dev/zero; exit 3")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.stdout) != 64<<10 || !r.exit.GetStdoutTruncated() || r.exit.GetStderrTruncated() || r.exit.GetExitCode() != 3 {
		t.Fatalf("got %d bytes, truncated=%v/%v exit=%d", len(r.stdout), r.exit.GetStdoutTruncated(), r.exit.GetStderrTruncated(), r.exit.GetExitCode())
	}
}

// Output is forwarded as produced, not when the command ends.
func TestExecStreamsAsProduced(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	marker := filepath.Join(in.StateDir, "go-on")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"echo first; while [ ! -e " + marker + " ]; do sleep 0.01; done; echo second"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv after %q: %v", got, err)
		}
		if o := msg.GetOutput(); o != nil {
			got = append(got, string(o.GetData()))
			if string(o.GetData()) == "first\n" {
				// Only now may the command go on: "first" arrived while it ran.
				if err := os.WriteFile(marker, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		if msg.GetExit() != nil {
			break
		}
	}
	if strings.Join(got, "") != "first\nsecond\n" {
		t.Fatalf("output %q", got)
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	pidFile := filepath.Join(in.StateDir, "pids")
	r := execReq(t, in, &coilyv1.ExecRequest{
		Argv:    []string{"/bin/sh", "-c", "sleep 60 & echo $! > " + pidFile + "; echo $$ >> " + pidFile + "; wait"},
		Timeout: durationpb.New(300 * time.Millisecond),
	})
	wantCode(t, r.err, refusal.CommandTimeout)
	waitGone(t, readPids(t, pidFile), 5*time.Second)
}

func TestExecClientCancelKillsProcessGroup(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	pidFile := filepath.Join(in.StateDir, "pids")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := in.Client.API.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"sleep 60 & echo $! > " + pidFile + "; echo $$ >> " + pidFile + "; echo ready; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg.GetOutput() != nil {
			break
		}
	}
	pids := readPids(t, pidFile)
	cancel()
	waitGone(t, pids, 5*time.Second)
	in.WaitAudit(t, func(r audit.Record) bool { return r.Event == "exec.result" && r.Decision == "refuse" })
}

// A failed audit write fails the request, and the command does not run.
func TestExecRefusedWhenAuditFails(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	if err := in.Audit.Close(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(in.StateDir, "ran")
	r := execArgv(t, in, "/bin/sh", "-c", "touch "+marker)
	wantCode(t, r.err, refusal.Internal)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("command ran although its decision could not be audited")
	}
}

// A bare command name is resolved by the server from the policy: the
// rule's binary runs, with argv[0] as the caller typed it, and the audit
// records the argv as typed. A name no rule has, or a relative path, is
// refused before anything runs.
func TestExecBareName(t *testing.T) {
	in := testserver.Start(t, testserver.Options{})
	r := execArgv(t, in, "sh", "-c", `echo "$0"; command -v sh >/dev/null && echo ran`)
	if r.err != nil || r.stdout != "sh\nran\n" {
		t.Fatalf("bare sh: %q %v", r.stdout, r.err)
	}
	recs, err := audit.Tail(filepath.Join(in.StateDir, "audit"), 10)
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	if last.Event != "exec.result" || len(last.Argv) == 0 || last.Argv[0] != "sh" || last.Rule != "sh" {
		t.Fatalf("audit record %+v: want argv[0] sh as typed, rule sh", last)
	}
	wantCode(t, execArgv(t, in, "id").err, refusal.PolicyDeny)
	wantCode(t, execArgv(t, in, "./sh").err, refusal.BadRequest)
	wantCode(t, execArgv(t, in, "bin/sh").err, refusal.BadRequest)
}
