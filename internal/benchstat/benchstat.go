// Package benchstat holds what the benchmarks share: each benchmark
// collects per-iteration durations of coily and of its baseline,
// interleaved (Interleave), and reports percentiles, differences and
// ratios.
package benchstat

import (
	"slices"
	"testing"
	"time"
)

// Percentile returns the p-th percentile (0–100) of d; 0 when d is empty.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// Interleave runs every arm once an iteration, in order, b.N times, with
// the benchmark's timer running for the loop only, and returns each arm's
// durations: the i-th run of each arm next to the others' i-th, so that
// all of them see the same machine.
func Interleave(b *testing.B, arms ...func()) [][]time.Duration {
	d := make([][]time.Duration, len(arms))
	for i := range d {
		d[i] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for range b.N {
		for i, arm := range arms {
			t0 := time.Now()
			arm()
			d[i] = append(d[i], time.Since(t0))
		}
	}
	b.StopTimer()
	return d
}

// MS is d in milliseconds.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Report reports the p50 and p99 of d, in milliseconds, as name-p50-ms and
// name-p99-ms.
func Report(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(MS(Percentile(d, 50)), name+"-p50-ms")
	b.ReportMetric(MS(Percentile(d, 99)), name+"-p99-ms")
}

// Added is what a adds to base at the p-th percentile, in milliseconds.
func Added(a, base []time.Duration, p int) float64 {
	return MS(Percentile(a, p) - Percentile(base, p))
}

// Ratio is Percentile(a, p) / Percentile(b, p).
func Ratio(a, b []time.Duration, p int) float64 {
	return float64(Percentile(a, p)) / float64(Percentile(b, p))
}
