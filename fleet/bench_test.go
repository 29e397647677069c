package fleet_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/server"
	"coily.dev/coily/store/etcdstore"
)

// benchPolicy is LocalPolicy with a rate on true (one token taken from
// the shared state per Exec: an etcd transaction on a fleet, contended
// by every host, since the bucket is the principal's) and none on echo
// (nothing written to the shared state on admission).
const benchPolicy = `version: 1
limits: {concurrency: 8}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: [echo, "true"]
commands:
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: "true", binary: /bin/true, args: ["**"], flags: any, sandbox: native, rate: {per_minute: 1000000, burst: 1000000}}
`

// benchConcurrency is how many Execs each setup has in flight.
const benchConcurrency = 4

// execer makes the k-th Exec of a batch.
type execer func(k int, argv []string) error

func clientExec(c *client.Client) func(argv []string) error {
	return func(argv []string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: argv}, io.Discard, io.Discard)
		return err
	}
}

// BenchmarkFleetExec: Execs of a rated /bin/true and of an unrated
// /bin/echo, benchConcurrency at a time, on one host with its state in
// bbolt (the baseline), one host with it in etcd (a 3-member cluster),
// three etcd hosts spread round-robin from one client, and three behind
// one failover client (--server a,b,c), interleaved in batches of 20 so
// that every setup sees the same machine. b.N Execs per setup and
// command. Reports p50 and p99 latency and Execs per second, and each as
// a ratio to the baseline (docs/benchmarks.md).
func BenchmarkFleetExec(b *testing.B) {
	b.Setenv("XDG_CACHE_HOME", b.TempDir()) // the failover client's sticky file
	one := testserver.Start(b, testserver.Options{Policy: benchPolicy, SandboxUIDs: server.UIDRange{Off: true}})
	ns := serversWith(b, testserver.Options{Policy: benchPolicy}, etcdstore.Config{})
	var targets []client.Target
	for i, n := range ns {
		var d net.Dialer
		sock := n.Socket
		targets = append(targets, client.Target{Name: fmt.Sprintf("h%d:1", i),
			Dial: func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }})
	}
	fo := client.NewServers(targets, nil)
	b.Cleanup(func() { fo.Close() })
	var spread []func([]string) error
	for _, n := range ns {
		spread = append(spread, clientExec(n.Client))
	}
	setups := []struct {
		name string
		exec execer
	}{
		{"bbolt, one host", func(_ int, argv []string) error { return clientExec(one.Client)(argv) }},
		{"etcd, one host", func(_ int, argv []string) error { return spread[0](argv) }},
		{"etcd, three hosts spread", func(k int, argv []string) error { return spread[k%3](argv) }},
		{"etcd, three hosts, failover client", func(_ int, argv []string) error { return clientExec(fo)(argv) }},
	}
	commands := [][]string{{"/bin/true"}, {"/bin/echo"}}
	type cell struct {
		lat  []time.Duration
		wall time.Duration
	}
	cells := make([][]cell, len(commands))
	for c := range cells {
		cells[c] = make([]cell, len(setups))
	}
	const batch = 20
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for c, argv := range commands {
			for s, su := range setups {
				lat, wall := runBatch(b, su.exec, argv, n)
				cells[c][s].lat = append(cells[c][s].lat, lat...)
				cells[c][s].wall += wall
			}
		}
	}
	b.StopTimer()
	for c, argv := range commands {
		base := stats(cells[c][0].lat, cells[c][0].wall)
		for s, su := range setups {
			st := stats(cells[c][s].lat, cells[c][s].wall)
			b.Logf("%-10s %-36s p50 %6.2f ms (%.2f×)  p99 %6.2f ms (%.2f×)  %6.1f Execs/s (%.2f×)",
				argv[0], su.name, ms(st.p50), ratio(st.p50, base.p50), ms(st.p99), ratio(st.p99, base.p99),
				st.rate, st.rate/base.rate)
		}
	}
}

// runBatch makes n Execs of argv through exec, benchConcurrency at a
// time, and returns each one's latency and the batch's wall time.
func runBatch(b *testing.B, exec execer, argv []string, n int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	next := make(chan int, n)
	for k := range n {
		next <- k
	}
	close(next)
	var wg sync.WaitGroup
	start := time.Now()
	for range benchConcurrency {
		wg.Go(func() {
			for k := range next {
				t0 := time.Now()
				if err := exec(k, argv); err != nil {
					b.Errorf("exec %v: %v", argv, err)
					return
				}
				lat[k] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start)
}

type benchStats struct {
	p50, p99 time.Duration
	rate     float64
}

func stats(lat []time.Duration, wall time.Duration) benchStats {
	s := slices.Clone(lat)
	slices.Sort(s)
	return benchStats{p50: s[len(s)/2], p99: s[len(s)*99/100], rate: float64(len(s)) / wall.Seconds()}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
