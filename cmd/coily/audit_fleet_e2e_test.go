package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/fleet/auditship"
	"coily.dev/coily/internal/etcdtest"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/store/etcdstore"
)

// fleetLogs starts a one-member cluster and two hosts' logs, a and b,
// each shipped by its shipper, and returns the CLI's flags to reach it,
// the logs and the store.
func fleetLogs(t *testing.T) (flags []string, logs map[string]*audit.Log, st *etcdstore.Store) {
	t.Helper()
	c := etcdtest.Start(t, 1, etcdtest.Options{})
	ca, cert, key, err := c.ClientFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err = etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: c.Endpoints(), TLS: c.ClientTLS(), Prefix: "/coily/cli/", AuditOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs = map[string]*audit.Log{}
	for _, h := range []string{"a", "b"} {
		l, err := audit.Open(audit.Config{Dir: t.TempDir(), Host: h})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		sh, err := auditship.Start(auditship.Config{Store: st, Log: l, Host: h, Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sh.Stop)
		logs[h] = l
	}
	member := strings.TrimPrefix(c.Endpoint(0), "https://")
	return []string{"--fleet", "--state", "etcd://" + member + "/cli", "--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", key}, logs, st
}

func appendRec(t *testing.T, l *audit.Log, principal string) {
	t.Helper()
	if _, err := l.Append(context.Background(), audit.Record{Event: "exec.decision", Principal: principal, Decision: "allow", Argv: []string{"gh", principal}}); err != nil {
		t.Fatal(err)
	}
}

// waitShipped waits until the view holds n records.
func waitShipped(t *testing.T, st *etcdstore.Store, n int) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprint(n, " records shipped"), func() bool {
		v, err := st.AuditTail(context.Background(), 1000, nil)
		return err == nil && len(v.Records) == n
	})
}

// TestCLIAuditTailFleet: `coily audit tail --fleet` prints the last
// records of every host merged by time, each naming its host, with the
// filters applied; --follow prints each one shipped after; a record
// forged under a host's key fails it.
func TestCLIAuditTailFleet(t *testing.T) {
	flags, logs, st := fleetLogs(t)
	appendRec(t, logs["a"], "tag:one")
	appendRec(t, logs["b"], "tag:two")
	appendRec(t, logs["a"], "tag:two")
	waitShipped(t, st, 3)
	r := runCoily(t, nil, append([]string{"audit", "tail"}, flags...)...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("tail --fleet: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, want := range []string{"A000000000001  a  ", "A000000000001  b  ", "A000000000002  a  "} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d: %q, want it to begin %q", i, lines[i], want)
		}
	}
	r = runCoily(t, nil, append([]string{"audit", "tail", "--json", "--principal", "tag:two", "-n", "1"}, flags...)...)
	var rec audit.Record
	if err := json.Unmarshal([]byte(r.stdout), &rec); r.code != 0 || err != nil || rec.Host != "a" || rec.Principal != "tag:two" {
		t.Fatalf("--json --principal tag:two -n 1: %v %+v\n%s", err, rec, r.stderr)
	}
	// A bound of bytes that holds one record: the newest is printed, and
	// stderr says older ones were left out.
	v, err := st.AuditTail(context.Background(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, rec := range v.Records {
		size = max(size, rec.Size)
	}
	r = runCoily(t, nil, append([]string{"audit", "tail", "--fleet-bytes", fmt.Sprint(size + 1)}, flags...)...)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "A000000000002  a  ") ||
		!strings.Contains(r.stderr, "2 or more older records of the last 20 left out") {
		t.Fatalf("tail --fleet --fleet-bytes %d: %d\n%s%s", size+1, r.code, r.stdout, r.stderr)
	}
	if r := runCoily(t, nil, "audit", "tail", "--fleet"); r.code != 2 || !strings.Contains(r.stderr, "--state") {
		t.Fatalf("--fleet alone: %d %s", r.code, r.stderr)
	}

	cmd := exec.Command(coilyBin, append([]string{"audit", "tail", "-n", "0", "--follow"}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	// The follower may start after the record is shipped: append until
	// one is printed (the watch begins at the tail's revision).
	seen := false
	for i := 0; i < 100 && !seen; i++ {
		appendRec(t, logs["b"], fmt.Sprint("tag:later", i))
		select {
		case l := <-out:
			seen = strings.Contains(l, "  b  ") && strings.Contains(l, "tag:later")
			if !seen {
				t.Fatalf("--follow printed %q", l)
			}
		case <-time.After(300 * time.Millisecond):
		}
	}
	if !seen {
		t.Fatal("--follow printed nothing of b's later records")
	}
	_ = cmd.Process.Kill()

	v2, err := st.AuditTail(context.Background(), 1000, nil)
	a2 := v2.Records
	if err != nil {
		t.Fatal(err)
	}
	forgeUnder(t, st, a2)
	if r := runCoily(t, nil, append([]string{"audit", "tail"}, flags...)...); r.code != 1 || !strings.Contains(r.stderr, "corrupt") {
		t.Fatalf("tail over a forged record: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// forgeUnder ships b's record 1, as written, as the next record of a (a
// writer of etcd forging a's record).
func forgeUnder(t *testing.T, st *etcdstore.Store, recs []etcdstore.AuditRecord) {
	t.Helper()
	var next uint64
	for _, r := range recs {
		if r.Host == "a" {
			next = max(next, r.Seq+1)
		}
	}
	line, err := json.Marshal(recs[1].Record) // b's record 1 (as encoded here, not as written: refused either way)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = st.ShipAudit(ctx, "a", []etcdstore.AuditLine{{Seq: next, Time: time.Now(), Line: line}})
	if err != nil {
		t.Fatal(err)
	}
}
