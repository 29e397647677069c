package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
)

// egressLog writes two exec records with egress rows through the real
// audit writer, the second with hostile hosts and reasons, and returns
// the state dir and the records as stored.
func egressLog(t *testing.T) (string, []audit.Record) {
	t.Helper()
	dir := t.TempDir()
	log, err := audit.Open(audit.Config{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	at := time.Date(2026, 11, 25, 4, 46, 23, 0, time.UTC)
	zero := 0
	recs := []audit.Record{
		{Event: "exec", RequestID: "R-egress", Principal: "tag:agent", Transport: "tailnet", Decision: "allow", Rule: "gh",
			Argv: []string{"/usr/bin/gh", "api", "two words"}, ExitCode: &zero, DurationMS: 1234.5,
			Egress: []audit.EgressRow{
				{Host: "api.github.com", Port: 443, Decision: "allow", Conns: 3, BytesUp: 1234, BytesDown: 45_000, DurationMS: 820.4, First: at, Last: at.Add(time.Second)},
				{Host: "evil.example", Port: 443, Decision: "deny", Reason: "not-allowlisted", Conns: 1, First: at, Last: at},
			}},
		{Event: "exec", RequestID: "R-hostile-egress", Principal: "tag:agent", Decision: "allow", Rule: "gh", Argv: []string{"/usr/bin/gh", forgeLine},
			Egress: []audit.EgressRow{
				{Host: forgeLine, Port: 443, Decision: "observe-deny", Reason: oscReason, Conns: 1, First: at, Last: at},
				{Host: bidiC1, Port: 80, Decision: "deny", Reason: "x\ncoily: egress allow   ok.example:443", Conns: 2, First: at, Last: at},
			}},
	}
	for i, r := range recs {
		if recs[i], err = log.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return dir, recs
}

// storedLine is the line of the audit log that holds id, as on disk.
func storedLine(t *testing.T, dir, id string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if strings.HasPrefix(l, `{"id":"`+id+`"`) {
				return l
			}
		}
	}
	t.Fatalf("no line for %s", id)
	return ""
}

// TestCLIAuditShowsEgressRows: `audit tail` and `audit show` print a
// record's egress rows after its own lines, hostile hosts and reasons
// escaped; --json prints the records as stored.
func TestCLIAuditShowsEgressRows(t *testing.T) {
	dir, recs := egressLog(t)
	allowRow := "  egress allow   api.github.com:443  3 conns  1.2 kB up  45 kB down  820ms"
	denyRow := "  egress deny    evil.example:443  1 conn  not-allowlisted"
	hostileRows := []string{
		"  egress observe-deny  [" + forgeLineArg + "]:443  1 conn  0 B up  0 B down  0ms  " + oscReasonText,
		"  egress deny    [" + bidiC1Arg + "]:80  2 conns  " + `x\ncoily: egress allow   ok.example:443`,
	}

	r := runCoily(t, nil, "audit", "tail", "--state-dir", dir)
	if r.code != 0 {
		t.Fatalf("audit tail: %+v", r)
	}
	requireTerminalSafe(t, "audit tail", r.stdout, 6)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if !strings.HasPrefix(lines[0], recs[0].ID) || !strings.Contains(lines[0], "/usr/bin/gh api 'two words'") ||
		lines[1] != allowRow || lines[2] != denyRow || !strings.HasPrefix(lines[3], recs[1].ID) ||
		!strings.Contains(lines[3], "/usr/bin/gh "+forgeLineArg) || !reflect.DeepEqual(lines[4:], hostileRows) {
		t.Fatalf("audit tail: argv and rows not as expected:\n%s", r.stdout)
	}

	r = runCoily(t, nil, "audit", "show", "--state-dir", dir, recs[0].ID)
	if r.code != 0 {
		t.Fatalf("audit show: %+v", r)
	}
	requireTerminalSafe(t, "audit show", r.stdout, -1)
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "/usr/bin/gh api 'two words'") || !strings.Contains(lines[0], "exit=0") ||
		!reflect.DeepEqual(lines[len(lines)-2:], []string{allowRow, denyRow}) {
		t.Fatalf("audit show: summary, fields, then rows expected:\n%s", r.stdout)
	}
	for _, want := range []string{"  request   R-egress", "  rule      gh", "  transport tailnet", "  duration  1.2s"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("audit show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runCoily(t, nil, "audit", "show", "--state-dir", dir, "R-hostile-egress")
	if r.code != 0 {
		t.Fatalf("audit show hostile: %+v", r)
	}
	requireTerminalSafe(t, "audit show hostile", r.stdout, -1)
	if !strings.HasSuffix(r.stdout, strings.Join(hostileRows, "\n")+"\n") {
		t.Fatalf("audit show hostile: rows not escaped as expected:\n%s", r.stdout)
	}
}

// TestCLIAuditJSONCarriesEgress: `audit show --json` prints the record
// byte for byte as stored (when nothing needs escaping), `audit tail
// --json` one record a line; both decode to the records, egress rows and
// hostile text included.
func TestCLIAuditJSONCarriesEgress(t *testing.T) {
	dir, recs := egressLog(t)
	r := runCoily(t, nil, "audit", "show", "--json", "--state-dir", dir, recs[0].ID)
	if want := storedLine(t, dir, recs[0].ID); r.code != 0 || r.stdout != want {
		t.Fatalf("audit show --json:\n got %+v\nwant %s", r, want)
	}
	t.Setenv("COILY_JSON", "1") // the env twin
	r = runCoily(t, nil, "audit", "show", "--state-dir", dir, "R-hostile-egress")
	if r.code != 0 {
		t.Fatalf("audit show (COILY_JSON): %+v", r)
	}
	requireTerminalSafe(t, "audit show --json", r.stdout, 1)
	var got audit.Record
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !reflect.DeepEqual(got, recs[1]) {
		t.Fatalf("audit show --json decodes to %#v (%v), want %#v", got, err, recs[1])
	}
	t.Setenv("COILY_JSON", "")

	r = runCoily(t, nil, "audit", "tail", "--json", "--state-dir", dir)
	if r.code != 0 {
		t.Fatalf("audit tail --json: %+v", r)
	}
	requireTerminalSafe(t, "audit tail --json", r.stdout, len(recs))
	dec := json.NewDecoder(bytes.NewReader([]byte(r.stdout)))
	dec.DisallowUnknownFields()
	for i := range recs {
		var got audit.Record
		if err := dec.Decode(&got); err != nil || !reflect.DeepEqual(got, recs[i]) {
			t.Fatalf("audit tail --json record %d decodes to %#v (%v), want %#v", i, got, err, recs[i])
		}
	}
}
