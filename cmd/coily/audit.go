package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"coily.dev/coily/audit"
)

// The audit subcommands read the log files directly: they run on the host,
// as the server's user or root (the files are 0600).
func runAudit(ctx context.Context, e *env) int {
	return dispatch(ctx, e, "audit", "usage: coily audit tail [-n N] [--json] | show [--json] ID | verify | repair", map[string]subcommand{
		"tail":   func(_ context.Context, e *env) int { return auditTail(e) },
		"show":   func(_ context.Context, e *env) int { return auditShow(e) },
		"verify": func(_ context.Context, e *env) int { return withDir(e, "audit verify", 0, auditVerify) },
		"repair": func(_ context.Context, e *env) int { return withDir(e, "audit repair", 0, auditRepair) },
	})
}

// withDir parses a subcommand's flags (the global ones: --state-dir may
// come after the subcommand) and runs it with the audit directory and
// want positional arguments.
func withDir(e *env, name string, want int, run func(e *env, dir string) int) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if fs.NArg() != want {
		printLine(e.stderr, "usage: coily %s%s", name, strings.Repeat(" ID", want))
		return 2
	}
	e.args = fs.Args()
	return run(e, filepath.Join(*e.global.stateDir, "audit"))
}

func auditTail(e *env) int {
	fs := flag.NewFlagSet("audit tail", flag.ContinueOnError)
	n := intFlag(fs, "n", "COILY_AUDIT_LINES", 20, "number of records")
	asJSON := boolFlag(fs, "json", "COILY_JSON", "print records as JSON lines")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	recs, err := audit.Tail(filepath.Join(*e.global.stateDir, "audit"), *n)
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	for _, r := range recs {
		if *asJSON {
			printJSON(e.stdout, r)
			continue
		}
		printLine(e.stdout, "%s", summary(r))
		printEgress(e.stdout, "  ", r)
	}
	return 0
}

// auditShow prints the records of one audit id or request id: each as its
// summary line, its other fields one a line, and its egress rows; with
// --json, each record as stored, one a line.
func auditShow(e *env) int {
	fs := flag.NewFlagSet("audit show", flag.ContinueOnError)
	asJSON := boolFlag(fs, "json", "COILY_JSON", "print the records as stored, one JSON object a line")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: coily audit show [--json] ID (an audit id, or a request id)")
		return 2
	}
	dir, id := filepath.Join(*e.global.stateDir, "audit"), fs.Arg(0)
	recs := []audit.Record{}
	r, err := audit.Find(dir, id)
	if err == nil {
		recs = append(recs, r)
	} else if errors.Is(err, audit.ErrNotFound) {
		recs, err = audit.FindRequest(dir, id)
	}
	if err != nil {
		printLine(e.stderr, "coily audit show: %v", err)
		return 1
	}
	for _, r := range recs {
		if *asJSON {
			printJSON(e.stdout, r)
			continue
		}
		printLine(e.stdout, "%s", summary(r))
		for _, l := range detailLines(r) {
			printLine(e.stdout, "  %s", l)
		}
		printEgress(e.stdout, "  ", r)
	}
	return 0
}

func auditVerify(e *env, dir string) int {
	rep, err := audit.Verify(dir)
	if err != nil {
		printLine(e.stderr, "coily audit verify: FAILED: %v", err)
		return 1
	}
	printLine(e.stdout, "audit log OK: %d records in %d file(s); head %s", rep.Lines, rep.Files, rep.Last)
	return 0
}

// auditRepair cuts a torn last line (a crash or a full disk mid-write) and
// records that it did; the server refuses to start on a torn log until
// then. Run it with the server stopped.
func auditRepair(e *env, dir string) int {
	lock, code := takeStateDir(e, "coily audit repair", filepath.Dir(dir)) // never beside a running server
	if lock == nil {
		return code
	}
	defer lock.Close()
	rep, err := audit.Repair(audit.Config{Dir: dir}, localPrincipal())
	switch {
	case errors.Is(err, audit.ErrNotTorn):
		fmt.Fprintln(e.stdout, "nothing to repair: the last line is whole")
		return 0
	case err != nil:
		printLine(e.stderr, "coily audit repair: %v", err)
		return 1
	}
	printLine(e.stdout, "cut %d bytes (a torn line) from %s; recorded as %s (%s)", rep.CutBytes, rep.File, rep.Record.ID, rep.Record.Event)
	return 0
}

// printJSON writes r as one JSON line, safe for a terminal (termJSON).
func printJSON(w io.Writer, r audit.Record) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		printLine(w, "coily: record %s: %v", r.ID, err)
		return
	}
	_, _ = w.Write(termJSON(b.Bytes()))
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
		parts = append(parts, termArgv(r.Argv))
	}
	if r.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit=%d", *r.ExitCode))
	}
	if r.Reason != "" {
		parts = append(parts, fmt.Sprintf("(%s)", r.Reason))
	}
	return strings.Join(parts, "  ")
}

// detailLines are the fields of r that its summary line leaves out, one a
// line: "rule      gh".
func detailLines(r audit.Record) []string {
	var out []string
	add := func(name, value string) {
		if value != "" {
			out = append(out, fmt.Sprintf("%-10s%s", name, value))
		}
	}
	add("request", r.RequestID)
	add("method", r.Method)
	add("transport", r.Transport)
	if r.Principal != "" {
		add("peer", r.Peer) // the summary shows the peer only without a principal
	}
	add("rule", r.Rule)
	add("sandbox", r.Sandbox)
	if r.DurationMS != 0 {
		add("duration", humanMillis(r.DurationMS))
	}
	if r.Signal != 0 {
		add("signal", strconv.Itoa(r.Signal))
	}
	if r.Killed != 0 {
		add("killed", strconv.Itoa(r.Killed))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Details)) {
		add("detail", shellWord(k)+"="+shellWord(r.Details[k]))
	}
	return out
}

// printEgress prints r's egress rows, one a line after indent.
func printEgress(w io.Writer, indent string, r audit.Record) {
	for _, row := range r.Egress {
		printLine(w, "%s%s", indent, egressLine(row))
	}
	if cut := r.Details["egress_cut"]; cut != "" {
		printLine(w, "%segress rows cut: %s", indent, cut)
	}
}
