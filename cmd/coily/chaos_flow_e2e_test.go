package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// chaosPolicyVersion is the chaos policy with n extra rules placed before
// sh's: a prefix of it applied would refuse sh.
func chaosPolicyVersion(n int) string {
	head, sh, _ := strings.Cut(chaosPolicy, "  - {name: sh,")
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		fmt.Fprintf(&b, "  - {name: extra%d, binary: /bin/echo, args: [x%d], sandbox: native}\n", i, i)
	}
	return b.String() + "  - {name: sh," + sh
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeSlowly rewrites path in place in chunks of a few lines, pausing
// 100 to 600 ms between them (the writer's pace, not synchronisation).
func writeSlowly(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pauses := []time.Duration{100, 250, 400, 600}
	lines := strings.SplitAfter(content, "\n")
	for i := 0; i < len(lines); i += 4 {
		if _, err := f.WriteString(strings.Join(lines[i:min(i+4, len(lines))], "")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pauses[(i/4)%len(pauses)] * time.Millisecond)
	}
}

// A policy rewritten slowly in place while execs flow: every exec is
// answered and allowed (a half policy applied would refuse sh), and only
// whole versions are ever applied.
func chaosSlowPolicy(t *testing.T, rounds int) []*chaosResult {
	r := newChaosRig(t, shortDir(t), false)
	res := &chaosResult{name: "slow in-place policy write while execs flow", rounds: rounds}
	whole := map[string]bool{sha256Hex(chaosPolicy): true}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c := r.l.run(r.grpc(), "true"); c.refusal != "" {
					refused.Add(1)
				}
			}
		}()
	}
	for i := range rounds {
		next := chaosPolicyVersion(i + 1)
		whole[sha256Hex(next)] = true
		writeSlowly(t, r.pol, next)
		t0 := time.Now()
		for deadline := t0.Add(20 * time.Second); ; {
			st := r.serve.run(t, "status", "--json")
			if strings.Contains(st.stdout, sha256Hex(next)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the new policy is not in force after 20 s:\n%s", i, r.serve.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
		res.recover = append(res.recover, time.Since(t0))
	}
	close(stop)
	wg.Wait()
	r.finish(res)
	if n := refused.Load(); n > 0 {
		t.Errorf("%d execs refused while the policy was written (a half policy applied?)", n)
		res.notes = append(res.notes, fmt.Sprintf("%d execs refused while the policy was written", n))
	}
	recs, _ := audit.Tail(filepath.Join(r.dir, "audit"), 1<<30)
	for _, rec := range recs {
		if rec.Event == "policy.reload" && rec.Decision == "allow" && !whole[rec.Details["new_sha256"]] {
			t.Errorf("a half-written policy was applied: %s", rec.Details["new_sha256"])
			res.notes = append(res.notes, "a half-written policy was applied: "+rec.Details["new_sha256"])
		}
	}
	res.notes = append(res.notes, "seconds to recover: from the last byte written to the new policy in force")
	return []*chaosResult{res}
}

// A refusal flood from one caller (policy-deny, in-process gRPC clients):
// every refusal is answered and counted (one by one or in a
// refusal.summary), the log grows slowly, and a legitimate exec goes
// through at once. The first flood ends with a clean stop; the second
// with kill -9 right after the last answer: each refusal's summary is on
// disk before it is answered, so none is lost.
func chaosRefusalFlood(t *testing.T, rounds int) []*chaosResult {
	var out []*chaosResult
	for _, killed := range []bool{false, true} {
		res := &chaosResult{name: "refusal flood from one caller, then clean stop", rounds: rounds}
		if killed {
			res.name = "refusal flood from one caller, then kill -9"
		}
		r := newChaosRig(t, shortDir(t), false)
		sent, answered, elapsed, grew := chaosFlood(t, r, 100*rounds)
		res.requests += sent
		res.unanswered += sent - answered
		d, err := r.l.probe(r.grpc(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		res.recover = append(res.recover, d)
		if killed {
			r.serve.kill()
			r.serve = startServe(t, r.dir, r.pol)
		}
		r.finish(res)
		if counted := countRefusals(t, r.dir); counted != sent {
			res.lost += sent - counted
			res.notes = append(res.notes, fmt.Sprintf("%d refusals sent, %d on record", sent, counted))
		}
		res.notes = append(res.notes, fmt.Sprintf("%d refusals in %.2f s, audit log +%d bytes (%.0f bytes/s)",
			sent, elapsed.Seconds(), grew, float64(grew)/elapsed.Seconds()))
		out = append(out, res)
	}
	return out
}

// chaosFlood sends n refused execs from 16 connections of one caller
// (past its budget, a caller's refusals are answered in batches of at
// most one per 100 ms: the more connections, the faster the flood).
func chaosFlood(t *testing.T, r *chaosRig, n int) (sent, answered int, elapsed time.Duration, grew int64) {
	t.Helper()
	size0 := auditSize(r.dir)
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		c, err := client.DialLocal(r.serve.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/usr/bin/id"}}, io.Discard, io.Discard)
				cancel()
				if refusal.As(err).Code == refusal.PolicyDeny {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return n, int(ok.Load()), time.Since(start), auditSize(r.dir) - size0
}

func auditSize(stateDir string) int64 {
	var size int64
	files, _ := filepath.Glob(filepath.Join(stateDir, "audit", "*.jsonl"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			size += fi.Size()
		}
	}
	return size
}

// countRefusals counts the policy-deny refusals on record, one by one and
// in summaries.
func countRefusals(t *testing.T, stateDir string) int {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(stateDir, "audit"), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		switch {
		case rec.Event == "refusal.summary":
			c, _ := strconv.Atoi(rec.Details["count"])
			n += c
		case rec.Code == string(refusal.PolicyDeny):
			n++
		}
	}
	return n
}
