package fleet_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coily.dev/coily/fleet"
	"coily.dev/coily/internal/poll"
	"coily.dev/coily/internal/testserver"
	"coily.dev/coily/metrics"
	"coily.dev/coily/server"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// scrape reads a server's /metrics: each sample's value by its line's
// name and labels as exposed (`coily_etcd_calls_total{op="range",outcome="ok"}`).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsOnEtcd: a server on etcd counts its calls to the cluster by
// operation and outcome and times them, says whether the shared state is
// in reach, and counts the lockouts it learns from another host; a scrape
// of its /metrics sees each move.
func TestMetricsOnEtcd(t *testing.T) {
	hs := hosts(t) // hs[1] is another host; this server takes hs[0]'s proxy
	hs[0].sync.Stop()
	reg := prometheus.NewRegistry()
	var sync *fleet.Sync
	m, err := metrics.NewEtcd(reg, func() bool { return sync.Available() })
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: hs[0].link.Endpoints(), TLS: cluster.ClientTLS(),
		Prefix: hs[0].prefix, SealKey: sealKey, CallTimeout: 2 * time.Second, Observe: m.Call})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sync = fleet.New(fleet.Config{Store: s, Logger: quiet, LockoutLearnt: m.LockoutLearnt})
	in := testserver.Start(t, testserver.Options{KillGrace: killGrace, SandboxUIDs: server.UIDRange{Off: true}, Metrics: reg,
		Shared: func(*store.DB) store.Shared { return s }, Fleet: sync})
	n := &node{Instance: in, link: hs[0].link, store: s}
	poll.Until(t, within, "the server admits", func() bool { return n.exec("/bin/true") == nil })
	ops := httptest.NewServer(in.Server.OpsHandler(false))
	t.Cleanup(ops.Close)

	const (
		rangeOK     = `coily_etcd_calls_total{op="range",outcome="ok"}`
		watchOK     = `coily_etcd_calls_total{op="watch",outcome="ok"}`
		rangeTimed  = `coily_etcd_call_seconds_count{op="range"}`
		available   = `coily_shared_state_available`
		learnt      = `coily_lockouts_learnt_total`
		unavailable = `coily_etcd_calls_total{op="range",outcome="unavailable"}`
	)
	first := scrape(t, ops.URL)
	if first[available] != 1 || first[rangeOK] < 1 || first[watchOK] < 1 || first[rangeTimed] != first[rangeOK] || first[learnt] != 0 {
		t.Fatalf("after start: available %v, ranges %v (timed %v), watches %v, lockouts learnt %v",
			first[available], first[rangeOK], first[rangeTimed], first[watchOK], first[learnt])
	}
	poll.Until(t, within, "the health reads counted", func() bool { return scrape(t, ops.URL)[rangeOK] > first[rangeOK] })

	if err := hs[1].store.SetLockout(store.Stop{Active: true, By: "bob@", Reason: "from host 2", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, within, "the lockout from another host counted", func() bool {
		m := scrape(t, ops.URL)
		return m[learnt] == 1 && m["coily_lockout_active"] == 1
	})

	hs[0].link.Cut()
	poll.Until(t, within, "the host cut off says so", func() bool {
		m := scrape(t, ops.URL)
		return m[available] == 0 && m[unavailable] > 0
	})
	hs[0].link.Heal()
	poll.Until(t, within, "the host back says so", func() bool { return scrape(t, ops.URL)[available] == 1 })
	if got := scrape(t, ops.URL)[learnt]; got != 1 {
		t.Errorf("lockouts learnt after the reconnect: %v, want 1 (the same lockout, in force here all along)", got)
	}
}
