package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"coily.dev/coily/audit"
)

// The audit subcommands read the log files directly: they run on the host,
// as the server's user or root (the files are 0600).
func runAudit(ctx context.Context, e *env) int {
	dir := filepath.Join(*e.global.stateDir, "audit")
	return dispatch(ctx, e, "audit", "usage: coily audit tail [-n N] [--json] | show ID | verify", map[string]subcommand{
		"tail":   func(_ context.Context, e *env) int { return auditTail(e, dir) },
		"show":   func(_ context.Context, e *env) int { return auditShow(e, dir) },
		"verify": func(_ context.Context, e *env) int { return auditVerify(e, dir) },
	})
}

func auditTail(e *env, dir string) int {
	fs := flag.NewFlagSet("audit tail", flag.ContinueOnError)
	n := intFlag(fs, "n", "COILY_AUDIT_LINES", 20, "number of records")
	asJSON := boolFlag(fs, "json", "COILY_JSON", "print records as JSON lines")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	recs, err := audit.Tail(dir, *n)
	if err != nil {
		fmt.Fprintf(e.stderr, "coily audit tail: %v\n", err)
		return 1
	}
	for _, r := range recs {
		if *asJSON {
			printJSON(e.stdout, r)
			continue
		}
		fmt.Fprintln(e.stdout, summary(r))
	}
	return 0
}

func auditShow(e *env, dir string) int {
	if len(e.args) != 1 {
		fmt.Fprintln(e.stderr, "usage: coily audit show ID (an audit id, or a request id)")
		return 2
	}
	id := e.args[0]
	recs := []audit.Record{}
	r, err := audit.Find(dir, id)
	if err == nil {
		recs = append(recs, r)
	} else if errors.Is(err, audit.ErrNotFound) {
		recs, err = audit.FindRequest(dir, id)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "coily audit show: %v\n", err)
		return 1
	}
	for _, r := range recs {
		printJSON(e.stdout, r)
	}
	return 0
}

func auditVerify(e *env, dir string) int {
	rep, err := audit.Verify(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "coily audit verify: FAILED: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "audit log OK: %d records in %d file(s); head %s\n", rep.Lines, rep.Files, rep.Last)
	return 0
}

func printJSON(w io.Writer, r audit.Record) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(r)
}

// summary is one human line per record.
func summary(r audit.Record) string {
	parts := []string{r.ID, r.Time.Local().Format("2006-01-02 15:04:05"), r.Event, r.Decision}
	if r.Code != "" {
		parts = append(parts, r.Code)
	}
	who := r.Principal
	if who == "" {
		who = r.Peer
	}
	parts = append(parts, who)
	if len(r.Argv) > 0 {
		parts = append(parts, strings.Join(r.Argv, " "))
	}
	if r.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit=%d", *r.ExitCode))
	}
	if r.Reason != "" {
		parts = append(parts, fmt.Sprintf("(%s)", r.Reason))
	}
	return strings.Join(parts, "  ")
}
