package server_test

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// BenchmarkExecTrueVsForkExec measures an Exec of /bin/true through the
// local socket (identity, authorization, policy, two fsynced audit lines,
// two store commits, spawn, stream, exit) against a bare fork-exec of
// /bin/true, interleaved in the same run so both see the same machine.
// Run: go test -run '^$' -bench ExecTrueVsForkExec -benchtime 2000x ./server/
func BenchmarkExecTrueVsForkExec(b *testing.B) {
	in := testserver.Start(b, testserver.Options{})
	ctx := context.Background()
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
		b.Fatal(err) // also warms the connection
	}
	fork := make([]time.Duration, 0, b.N)
	coily := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		fork, coily = append(fork, t1.Sub(t0)), append(coily, time.Since(t1))
	}
	b.StopTimer()
	reportPercentiles(b, "forkexec", fork)
	reportPercentiles(b, "coily", coily)
	b.ReportMetric(ms(percentile(coily, 50)-percentile(fork, 50)), "added-p50-ms")
	b.ReportMetric(ms(percentile(coily, 99)-percentile(fork, 99)), "added-p99-ms")
}

func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(ms(percentile(d, 50)), name+"-p50-ms")
	b.ReportMetric(ms(percentile(d, 99)), name+"-p99-ms")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
