package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit"
	"coily.dev/coily/cli"
	"coily.dev/coily/fleet/auditship"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// auditCmd is `coily audit`: the subcommands read the log files directly,
// on the host, as the server's user or root (the files are 0600).
func auditCmd(a *cli.App) *cobra.Command {
	return group("audit", "read the audit log: tail, show, verify, repair, key, prove",
		`Read the hash-chained audit log in <state-dir>/audit directly (on the host, as the server's user or
root: the files are 0600): the last records, the records of one audit or request id, a check of the
whole chain (and against a signed checkpoint a witness kept), the repair of a torn last record, the
key checkpoints are signed with, and a record's inclusion proof.`,
		command(a, spec{use: "tail [-n N] [--follow] [--principal P] [--rule R] [--code C] [--json] [--fleet --state etcd://… --etcd-ca …]",
			short: "print the last records, and with --follow each as it is written; with --fleet, every host's",
			flags: func(fs *pflag.FlagSet) runFunc {
				n := fs.IntP("n", "n", 20, "number of records")
				cli.Twin(fs, "n", "COILY_AUDIT_LINES")
				asJSON := boolFlag(fs, "json", "COILY_JSON", "print records as JSON lines")
				follow := fs.BoolP("follow", "f", false, "then print each record as it is written, across new files, until interrupted")
				var f audit.Filter
				fs.StringVar(&f.Principal, "principal", "", "only the records of this principal (exact)")
				fs.StringVar(&f.Rule, "rule", "", "only the records of this rule (exact)")
				fs.StringVar(&f.Code, "code", "", "only the records with this refusal code (exact), e.g. policy-deny")
				fleet := fs.Bool("fleet", false, "read every host's records from the etcd cluster the fleet shares (with --state and the --etcd-* flags, as coily serve takes them), each naming its host, merged by time")
				ef := registerEtcdFlags(fs, stringFlag(fs, "state", "COILY_STATE", "", "with --fleet: the cluster, etcd://HOST:PORT,HOST:PORT/CLUSTER, as coily serve --state names it"))
				maxBytes := fs.Int("fleet-bytes", 0, "with --fleet: the most bytes of records (their lines, every host's in all) the last -n may hold, 0 for 16 MiB; older records past it are left out, and said so on stderr")
				return func(ctx context.Context, e *env) int {
					if *fleet {
						if *maxBytes < 0 {
							return usage(e, "audit tail: --fleet-bytes must be 0 (16 MiB) or more")
						}
						return auditTailFleet(ctx, e, ef, fleetTail{n: *n, maxBytes: *maxBytes, f: f, follow: *follow, asJSON: *asJSON})
					}
					return auditTail(ctx, e, *n, f, *follow, *asJSON)
				}
			}}),
		command(a, spec{use: "show [--json] ID", short: "print the records of an approval id, a request id or an audit id", args: cobra.ExactArgs(1),
			flags: func(fs *pflag.FlagSet) runFunc {
				asJSON := boolFlag(fs, "json", "COILY_JSON", "print the records as stored, one JSON object a line")
				return func(_ context.Context, e *env) int { return auditShow(e, e.args[0], *asJSON) }
			}}),
		command(a, spec{use: "verify [--json] [--checkpoint FILE|URL --key KEY [--witness-key WKEY [--max-age D]]]",
			short: "check the whole hash chain, across rotated files, that it holds the head the state file recorded, and what a witnessed checkpoint commits to",
			flags: func(fs *pflag.FlagSet) runFunc {
				asJSON := boolFlag(fs, "json", "COILY_JSON", "print the report as JSON")
				cp := fs.String("checkpoint", "", "a signed checkpoint kept off the host: a file, or a witness's URL (its latest checkpoint of this log): the log must hold exactly the records it commits to, and extend them")
				k := registerPinnedKey(fs)
				k.witnessKey = fs.String("witness-key", "", "with --checkpoint: the witness's key you pinned (what `coily witness key` printed): the checkpoint must carry its cosignature")
				k.maxAge = fs.Duration("max-age", 0, "with --witness-key: refuse a cosignature older than this (a replayed older checkpoint of the witness hides the records after it); 0: any age")
				return func(_ context.Context, e *env) int { return auditVerify(e, auditDir(e), *asJSON, *cp, k) }
			}}),
		command(a, spec{use: "repair", short: "cut a torn last record, record that it did and sign a checkpoint of the repaired log (server stopped)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(_ context.Context, e *env) int { return auditRepair(e, auditDir(e)) }
			}}),
		auditKeyCmd(a),
		auditProveCmd(a),
	)
}

func auditDir(e *env) string { return filepath.Join(e.global.StateDir, "audit") }

// followEvery is how often `audit tail --follow` looks for new records.
const followEvery = 250 * time.Millisecond

// auditTail prints the last n records f selects and, with follow, each
// one written after them until ctx ends (an interrupt).
func auditTail(ctx context.Context, e *env, n int, f audit.Filter, follow, asJSON bool) int {
	dir := auditDir(e)
	var after uint64 // with --follow: the log's last record before the tail is read
	last, err := audit.Tail(dir, 1)
	if follow && err == nil && len(last) == 1 {
		after = last[0].Seq
	}
	recs, err := audit.TailMatching(dir, n, f.Match)
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	show := func(r audit.Record) error {
		showRecord(e, r, asJSON)
		return nil
	}
	for _, r := range recs {
		_ = show(r)
		after = max(after, r.Seq)
	}
	if !follow {
		return 0
	}
	err = audit.Follow(ctx, dir, after, followEvery, func(r audit.Record) error {
		if f.Match(r) {
			return show(r)
		}
		return nil
	})
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	return 0
}

// fleetTail is what audit tail --fleet was asked.
type fleetTail struct {
	n, maxBytes    int
	f              audit.Filter
	follow, asJSON bool
}

// auditTailFleet is auditTail of every host's records, read from the
// cluster the fleet ships them to (package fleet/auditship): the last n
// f selects, merged by time (at most maxBytes of them: the older are left
// out, said on stderr), and with follow each one shipped after them.
func auditTailFleet(ctx context.Context, e *env, ef *etcdFlags, q fleetTail) int {
	if *ef.state == "" {
		return usage(e, "audit tail --fleet needs --state etcd://HOST:PORT,…/CLUSTER and the --etcd-* flags")
	}
	cfg, err := ef.conn()
	if err != nil {
		return usage(e, "audit tail: %v", err)
	}
	cfg.AuditOnly, cfg.AuditTailBytes = true, q.maxBytes
	st, err := etcdstore.Open(ctx, cfg)
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	defer st.Close()
	v, err := auditship.Tail(ctx, st, q.n, q.f.Match)
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	if v.Dropped > 0 {
		printLine(e.stderr, "coily audit tail: %d or more older records of the last %d left out: the view holds at most %d bytes of records (--fleet-bytes)",
			v.Dropped, q.n, cmp.Or(q.maxBytes, etcdstore.DefaultAuditTailBytes))
	}
	for _, r := range v.Records {
		showRecord(e, r, q.asJSON)
	}
	if !q.follow {
		return 0
	}
	err = auditship.Follow(ctx, st, v.Rev, func(r audit.Record) error {
		if q.f.Match(r) {
			showRecord(e, r, q.asJSON)
		}
		return nil
	})
	if err != nil {
		printLine(e.stderr, "coily audit tail: %v", err)
		return 1
	}
	return 0
}

// showRecord prints r as JSON, or as its summary line and egress rows.
func showRecord(e *env, r audit.Record, asJSON bool) {
	if asJSON {
		printJSON(e.stdout, r)
		return
	}
	printLine(e.stdout, "%s", summary(r))
	printEgress(e.stdout, "  ", r)
}

// auditShow prints the records an id names (audit.Lookup): an audit id's
// record, or every record of the request a request id or an approval id
// names. Each is its summary line, its other fields one a line, and its
// egress rows; with --json, each record as stored, one a line. An id no
// record can carry is a usage error, before the log is read.
func auditShow(e *env, id string, asJSON bool) int {
	recs, err := audit.Lookup(auditDir(e), id)
	switch {
	case errors.Is(err, audit.ErrBadID):
		return usage(e, "audit show: %v", err)
	case err != nil:
		printLine(e.stderr, "coily audit show: %v", err)
		return 1
	}
	for _, r := range recs {
		if asJSON {
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

// auditVerify checks the whole chain, then that the log still holds the
// head the state file beside it recorded (a log cut back is whole, but
// short).
func auditVerify(e *env, dir string, asJSON bool, cpPath string, k pinnedKey) int {
	var rep audit.Report
	var err error
	var tree *treeCheck
	if cpPath == "" {
		rep, err = audit.Verify(dir)
	} else {
		var code int
		if tree, code = openWitnessed(e, cpPath, k); tree == nil {
			return code
		}
		var tr audit.TreeReport
		tr, err = audit.VerifyCheckpoint(dir, tree.cp)
		rep, tree.now, tree.hashFile = tr.Report, tr.Tree, tr.Consistent
	}
	head, note := recordedHead(filepath.Join(filepath.Dir(dir), "coily.db"))
	if err == nil && head.Seq > 0 {
		if err = audit.CheckHead(dir, audit.Head{Seq: head.Seq, Hash: head.Hash}); err != nil {
			err = fmt.Errorf("%w (the head the state file recorded at %s)", err, head.At.UTC().Format(time.RFC3339))
		}
	}
	if asJSON {
		out := map[string]any{"ok": err == nil, "records": rep.Lines, "files": rep.Files, "head": rep.Last}
		if head.Seq > 0 {
			out["recorded_head"] = map[string]any{"seq": head.Seq, "hash": head.Hash, "at": head.At}
		}
		if note != "" {
			out["recorded_head_unchecked"] = note
		}
		if tree != nil {
			out["checkpoint"] = tree.json()
		}
		if err != nil {
			out["error"] = err.Error()
		}
		printJSON(e.stdout, out)
	}
	if err != nil {
		if !asJSON {
			printLine(e.stderr, "coily audit verify: FAILED: %v", err)
		}
		return 1
	}
	if !asJSON {
		printLine(e.stdout, "audit log OK: %d records in %d file(s); head %s", rep.Lines, rep.Files, rep.Last)
		switch {
		case head.Seq > 0:
			printLine(e.stdout, "it holds the head the state file recorded (record %d)", head.Seq)
		case note != "":
			printLine(e.stdout, "the state file's recorded head was not checked: %s", note)
		}
		if tree != nil {
			tree.print(e)
		}
	}
	return 0
}

// recordedHead reads the audit head the state file at path recorded,
// read-only. A state file that is missing or records none is no head and
// no note; one that cannot be read (a running server holds it: the server
// checks the head when it next starts) is a note saying why.
func recordedHead(path string) (store.AuditHead, string) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return store.AuditHead{}, ""
	}
	db, err := store.OpenReadOnly(path, 200*time.Millisecond)
	if err != nil {
		return store.AuditHead{}, err.Error()
	}
	defer db.Close()
	h, err := db.AuditHead()
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.AuditHead{}, ""
	case err != nil:
		return store.AuditHead{}, err.Error()
	}
	return h, ""
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
	return signRepaired(e, dir)
}

// printJSON writes v as one JSON line, safe for a terminal (termJSON).
func printJSON(w io.Writer, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		printLine(w, "coily: %v", err)
		return
	}
	_, _ = w.Write(termJSON(b.Bytes()))
}

// summary is one human line per record.
func summary(r audit.Record) string {
	parts := []string{r.ID, r.Time.Local().Format("2006-01-02 15:04:05"), r.Event, r.Decision}
	if r.Host != "" {
		parts = slices.Insert(parts, 1, r.Host) // a fleet's host: its record id is its own
	}
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
	add("relay id", r.RelayID)
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
		add("detail", cli.ShellWord(k)+"="+cli.ShellWord(r.Details[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Lists)) {
		for _, item := range r.Lists[k] { // one line an item: no item can pass for two
			add("list", cli.ShellWord(k)+" "+cli.ShellWord(item))
		}
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
	for _, q := range r.EgressRequests {
		printLine(w, "%s%s", indent, egressRequestLine(q))
	}
	if cut := r.Details["egress_requests_cut"]; cut != "" {
		printLine(w, "%segress requests cut: %s", indent, cut)
	}
}
