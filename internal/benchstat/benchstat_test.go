package benchstat

import (
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, n := range v {
		d[i] = time.Duration(n) * time.Millisecond
	}
	return d
}

func TestPercentile(t *testing.T) {
	d := ms(5, 1, 4, 2, 3)
	for p, want := range map[int]time.Duration{0: time.Millisecond, 50: 3 * time.Millisecond, 99: 5 * time.Millisecond, 100: 5 * time.Millisecond} {
		if got := Percentile(d, p); got != want {
			t.Errorf("Percentile(%v, %d) = %v, want %v", d, p, got, want)
		}
	}
	if d[0] != 5*time.Millisecond {
		t.Error("Percentile sorted its argument")
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile of nothing = %v", got)
	}
}

func TestAddedAndRatio(t *testing.T) {
	a, base := ms(6, 6, 6), ms(2, 2, 2)
	if got := Added(a, base, 50); got != 4 {
		t.Errorf("Added = %v ms, want 4", got)
	}
	if got := Ratio(a, base, 50); got != 3 {
		t.Errorf("Ratio = %v, want 3", got)
	}
}

// Interleave runs the arms in turn, b.N times each, and times every run.
func TestInterleave(t *testing.T) {
	var order []int
	var d [][]time.Duration
	r := testing.Benchmark(func(b *testing.B) {
		order = nil
		d = Interleave(b, func() { order = append(order, 0) }, func() { order = append(order, 1) })
	})
	if r.N == 0 || len(d) != 2 || len(d[0]) != r.N || len(d[1]) != r.N {
		t.Fatalf("%d arms of durations for b.N=%d: %v", len(d), r.N, d)
	}
	for i, arm := range order {
		if arm != i%2 {
			t.Fatalf("arms ran in the order %v", order)
		}
	}
}
