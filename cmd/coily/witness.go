package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit/witness"
	"coily.dev/coily/cli"
	"coily.dev/coily/httpserve"
)

// witnessLimits are a witness's HTTP server's: small bodies, few calls.
var witnessLimits = httpserve.Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second,
	WriteTimeout: 15 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}

// witnessCmd is `coily witness`: a witness of coily hosts' audit logs,
// off the trust point (package audit/witness).
func witnessCmd(a *cli.App) *cobra.Command {
	return group("witness", "run a witness of coily hosts' audit logs off the trust point (C2SP tlog-witness)",
		`Keep, off the trust point (on the owner's Mac or any box), the latest checkpoint of each coily host's
audit log, cosigning a new one only when a consistency proof shows it extends the last: whoever takes
the trust point cannot then hide a record that reached the witness. A host pushes its checkpoints
with coily serve --witness URL=KEY; coily audit verify --checkpoint URL checks a log against it.`,
		command(a, spec{use: "serve --listen ADDR --state DIR --log ORIGIN=VKEY...",
			short: "serve a witness: POST /add-checkpoint (C2SP tlog-witness) and GET /checkpoint/<origin>",
			flags: func(fs *pflag.FlagSet) runFunc {
				listen := stringFlag(fs, "listen", "COILY_WITNESS_LISTEN", "", "the address to serve on, e.g. 100.64.0.7:7445 (plain HTTP: signatures carry the trust)")
				dir := stringFlag(fs, "state", "COILY_WITNESS_STATE", "", "the witness's directory: its key (made once, 0600) and the checkpoints it holds")
				name := stringFlag(fs, "name", "COILY_WITNESS_NAME", "", "the witness key's name when it is made (default witness/<host name>)")
				logs := listFlag(fs, "log", "COILY_WITNESS_LOGS", "a log to witness, ORIGIN=VKEY: its origin and the verifier key `coily audit key` prints on its host (repeatable)")
				return func(ctx context.Context, e *env) int { return witnessServe(ctx, e, *listen, *dir, *name, logs.specs) }
			}}),
		command(a, spec{use: "key --state DIR", short: "print the witness's cosignature verifier key, to pin it (made once in DIR)",
			flags: func(fs *pflag.FlagSet) runFunc {
				dir := stringFlag(fs, "state", "COILY_WITNESS_STATE", "", "the witness's directory")
				name := stringFlag(fs, "name", "COILY_WITNESS_NAME", "", "the key's name when it is made (default witness/<host name>)")
				return func(_ context.Context, e *env) int { return witnessKey(e, *dir, *name) }
			}}),
		command(a, spec{use: "forget --state DIR ORIGIN", args: cobra.ExactArgs(1),
			short: "drop the checkpoint the witness holds for a log (witness stopped): the owner's repair once a log's lost records are accounted for",
			flags: func(fs *pflag.FlagSet) runFunc {
				dir := stringFlag(fs, "state", "COILY_WITNESS_STATE", "", "the witness's directory")
				return func(_ context.Context, e *env) int { return witnessForget(e, *dir, e.args[0]) }
			}}),
	)
}

// witnessName is the default name of a witness's key.
func witnessName(name string) string {
	if name != "" {
		return name
	}
	host, _ := os.Hostname()
	return strings.TrimPrefix(checkpointOrigin(cmp.Or(host, "localhost")), "coily/") + "/witness"
}

// parseLogs reads ORIGIN=VKEY specs (the verifier key must name ORIGIN).
func parseLogs(specs []string) (map[string]string, error) {
	logs := map[string]string{}
	for _, s := range specs {
		origin, vkey, ok := strings.Cut(s, "=")
		if !ok || origin == "" || !strings.HasPrefix(vkey, origin+"+") {
			return nil, fmt.Errorf("%q: want ORIGIN=VKEY, the key named ORIGIN (what `coily audit key` prints)", s)
		}
		if _, dup := logs[origin]; dup {
			return nil, fmt.Errorf("%s given twice", origin)
		}
		logs[origin] = vkey
	}
	return logs, nil
}

func witnessServe(ctx context.Context, e *env, listen, dir, name string, specs []string) int {
	if listen == "" || dir == "" || len(specs) == 0 {
		return usage(e, "witness serve needs --listen ADDR, --state DIR and at least one --log ORIGIN=VKEY")
	}
	logs, err := parseLogs(specs)
	if err != nil {
		return usage(e, "witness serve: --log %v", err)
	}
	lock, code := takeStateDir(e, "coily witness serve", dir)
	if lock == nil {
		return code
	}
	defer lock.Close()
	log := newLogger(e, "text")
	skey, err := witness.EnsureKey(dir, witnessName(name))
	if err != nil {
		printLine(e.stderr, "coily witness serve: %v", err)
		return 1
	}
	vkey, err := witness.VerifierOf(skey)
	if err != nil {
		printLine(e.stderr, "coily witness serve: %v", err)
		return 1
	}
	w, err := witness.New(witness.Config{Logs: logs, Key: skey, Dir: dir, Logger: log})
	if err != nil {
		printLine(e.stderr, "coily witness serve: %v", err)
		return 1
	}
	defer w.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		printLine(e.stderr, "coily witness serve: %v", err)
		return 1
	}
	hs := httpserve.New(w, witnessLimits, nil)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	log.Info("witness serving", "addr", ln.Addr().String(), "key", vkey, "logs", len(logs))
	select {
	case <-ctx.Done():
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			printLine(e.stderr, "coily witness serve: %v", err)
			return 1
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return 0
}

func witnessKey(e *env, dir, name string) int {
	if dir == "" {
		return usage(e, "witness key needs --state DIR")
	}
	skey, err := witness.EnsureKey(dir, witnessName(name))
	if err == nil {
		var vkey string
		if vkey, err = witness.VerifierOf(skey); err == nil {
			printLine(e.stdout, "%s", vkey)
			return 0
		}
	}
	printLine(e.stderr, "coily witness key: %v", err)
	return 1
}

func witnessForget(e *env, dir, origin string) int {
	if dir == "" {
		return usage(e, "witness forget needs --state DIR")
	}
	lock, code := takeStateDir(e, "coily witness forget", dir)
	if lock == nil {
		return code
	}
	defer lock.Close()
	t, err := witness.Forget(dir, origin)
	if err != nil {
		printLine(e.stderr, "coily witness forget: %v", err)
		return 1
	}
	printLine(e.stdout, "forgot the checkpoint of %s at %d records (root %s): its next checkpoint is taken as a first one", origin, t.N, t.Hash)
	return 0
}
