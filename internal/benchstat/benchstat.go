// Package benchstat holds the percentile helpers the benchmarks share: each
// benchmark collects per-iteration durations of coily and of its baseline,
// interleaved, and reports percentiles and ratios.
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

// MS is d in milliseconds.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Report reports the p50 and p99 of d, in milliseconds, as name-p50-ms and
// name-p99-ms.
func Report(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(MS(Percentile(d, 50)), name+"-p50-ms")
	b.ReportMetric(MS(Percentile(d, 99)), name+"-p99-ms")
}

// Ratio is Percentile(a, p) / Percentile(b, p).
func Ratio(a, b []time.Duration, p int) float64 {
	return float64(Percentile(a, p)) / float64(Percentile(b, p))
}
