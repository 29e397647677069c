package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
)

// The chaos suite (docs/reliability.md): crashes and faults while
// requests flow, each measured for records lost, commands run twice,
// requests unanswered, seconds to recover and starts more open than the
// state before the fault. The normal suite runs it short
// (COILY_CHAOS_ROUNDS unset: 3 rounds); scripts/chaos.sh runs it with 50
// and writes the table to COILY_CHAOS_REPORT.

// chaosRounds is how many times each repeated fault is injected.
func chaosRounds(t *testing.T) int {
	t.Helper()
	s := os.Getenv("COILY_CHAOS_ROUNDS")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("COILY_CHAOS_ROUNDS=%q: want a positive number", s)
	}
	return n
}

// chaosResult is one scenario's line of the table.
type chaosResult struct {
	name                              string
	rounds, requests                  int
	lost, twice, unanswered, moreOpen int
	// survived counts commands with a process alive after a lockout's
	// grace; othersRefused requests of other workspaces or principals
	// refused (a lockout nobody asked for included) after what a command
	// left in its own workspace.
	survived, othersRefused int
	recover                 []time.Duration
	notes                   []string
	// known names an open issue that explains this row's counts: the row
	// is reported (and scripts/chaos.sh fails on it) but does not fail
	// the test, so the normal suite stays green while the issue is open.
	known string
}

func (r *chaosResult) add(c chaosCounts) {
	r.requests += c.requests
	r.lost += c.lost
	r.twice += c.twice
	r.unanswered += c.unanswered
	r.notes = append(r.notes, c.notes...)
}

func (r *chaosResult) failed() bool {
	return r.known == "" && r.counts() > 0
}

func (r *chaosResult) counts() int {
	return r.lost + r.twice + r.unanswered + r.moreOpen + r.survived + r.othersRefused
}

// recoverText is the median and the worst time to recover, in seconds.
func (r *chaosResult) recoverText() string {
	if len(r.recover) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", benchstat.Percentile(r.recover, 50).Seconds(), benchstat.Percentile(r.recover, 100).Seconds())
}

// chaosTable renders the results as a Markdown table.
func chaosTable(results []*chaosResult) string {
	var b strings.Builder
	b.WriteString("| scenario | rounds | requests | records lost | run twice | unanswered | starts more open | survived lockout | others refused | seconds to recover (median / max) |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range results {
		name := r.name
		if r.known != "" && r.counts() > 0 {
			name += " (KNOWN: " + r.known + ")"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n",
			name, r.rounds, r.requests, r.lost, r.twice, r.unanswered, r.moreOpen, r.survived, r.othersRefused, r.recoverText())
	}
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(&b, "\n- %s: %s", r.name, n)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// TestChaos runs every scenario, prints the table and fails when any
// count is not zero.
func TestChaos(t *testing.T) {
	rounds := chaosRounds(t)
	var results []*chaosResult
	add := func(t *testing.T, r *chaosResult) {
		results = append(results, r)
		if r.failed() {
			t.Errorf("%s: %d records lost, %d run twice, %d unanswered, %d starts more open, %d survived a lockout, %d others refused; %s",
				r.name, r.lost, r.twice, r.unanswered, r.moreOpen, r.survived, r.othersRefused, strings.Join(r.notes, "; "))
		}
	}
	for _, sc := range []struct {
		name string
		run  func(*testing.T, int) []*chaosResult
	}{
		{"ServerKill", chaosServerKill},
		{"BridgeKill", chaosBridgeKill},
		{"FullDisk", chaosFullDisk},
		{"DamagedDB", chaosDamagedDB},
		{"SlowPolicyWrite", chaosSlowPolicy},
		{"RefusalFlood", chaosRefusalFlood},
		{"LockoutEveryTransport", chaosLockoutEvery},
		{"HostileWorkspace", chaosHostileWorkspace},
	} {
		t.Run(sc.name, func(t *testing.T) {
			for _, r := range sc.run(t, rounds) {
				add(t, r)
			}
		})
	}
	table := chaosTable(results)
	t.Logf("chaos suite, %d rounds:\n%s", rounds, table)
	if path := os.Getenv("COILY_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
