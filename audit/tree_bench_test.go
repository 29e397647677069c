package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// BenchmarkAppendTree is the cost of one record with the Merkle tree, and
// with the tree and a signed checkpoint every 1000 records (what the
// notary does, but the state file's write), against the chain alone:
// three logs, each iteration appending one record to each in turn, so
// that all three see the same machine; durable (Append, an fsync each)
// and pending (AppendPending: the CPU and the writes alone). It reports
// each one's median and mean per record.
func BenchmarkAppendTree(b *testing.B) {
	for _, durable := range []bool{true, false} {
		name := "pending"
		if durable {
			name = "durable"
		}
		b.Run(name, func(b *testing.B) {
			modes := []struct {
				name            string
				noTree, signing bool
			}{{"chain", true, false}, {"tree", false, false}, {"tree+checkpoints", false, true}}
			logs := make([]*Log, len(modes))
			took := make([][]time.Duration, len(modes))
			for i, m := range modes {
				l, err := Open(Config{Dir: b.TempDir(), noTree: m.noTree})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				logs[i] = l
			}
			ctx := context.Background()
			rec := sampleRecord(1)
			n := 0
			for b.Loop() {
				n++
				for k := range modes {
					i := (k + n) % len(modes) // each first in turn
					start := time.Now()
					if _, err := logs[i].append(ctx, rec, durable); err != nil {
						b.Fatal(err)
					}
					if modes[i].signing && n%1000 == 0 {
						signNow(b, logs[i])
					}
					took[i] = append(took[i], time.Since(start))
				}
			}
			for i, m := range modes {
				slices.Sort(took[i])
				var sum time.Duration
				for _, d := range took[i] {
					sum += d
				}
				b.ReportMetric(float64(took[i][len(took[i])/2].Nanoseconds()), m.name+"-p50-ns")
				b.ReportMetric(float64(sum.Nanoseconds())/float64(len(took[i])), m.name+"-mean-ns")
			}
		})
	}
}

// signNow signs and writes a checkpoint of l, as the notary does.
func signNow(b *testing.B, l *Log) {
	t, err := l.TreeHead()
	if err != nil {
		b.Fatal(err)
	}
	msg, err := SignCheckpoint(testSKey, t)
	if err != nil {
		b.Fatal(err)
	}
	if err := WriteCheckpoint(l.Dir(), msg); err != nil {
		b.Fatal(err)
	}
}

// bigLog writes a log of n records into dir the fast way (lines encoded
// and chained directly, 64 MiB files), then opens it once to build its
// hash file.
func bigLog(b *testing.B, dir string, n int) {
	b.Helper()
	start := time.Now()
	prev, part, size := zeroHash, 0, int64(0)
	var f *os.File
	var buf []byte
	flush := func() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		size += int64(len(buf))
		buf = buf[:0]
	}
	t0 := oct
	for seq := 1; seq <= n; seq++ {
		if f == nil || size >= DefaultMaxFileSize {
			if f != nil {
				flush()
				f.Close()
				part++
			}
			var err error
			f, err = os.Create(filepath.Join(dir, logFile{month: "2026-10", part: part}.fileName()))
			if err != nil {
				b.Fatal(err)
			}
			size = 0
		}
		r := sampleRecord(seq)
		r.Seq, r.ID, r.Time, r.Prev = uint64(seq), formatID(uint64(seq)), t0.Add(time.Duration(seq)*time.Millisecond), prev
		line, _, err := encodeLine(r)
		if err != nil {
			b.Fatal(err)
		}
		prev = hashHex(line[:len(line)-1])
		buf = append(buf, line...)
		if len(buf) > 1<<20 {
			flush()
		}
	}
	flush()
	f.Close()
	written := time.Since(start)
	start = time.Now()
	l, err := Open(Config{Dir: dir}) // builds tree.hashes from the lines
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.Logf("%d records: written in %v, hash file built at Open in %v", n, written, time.Since(start))
}

// signAt signs the checkpoint of the first n records of the log in dir.
func signAt(b *testing.B, dir string, n int64) []byte {
	r, closer, err := TreeReader(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer closer.Close()
	h, err := tlog.TreeHash(n, r)
	if err != nil {
		b.Fatal(err)
	}
	signed, err := SignCheckpoint(testSKey, Tree{N: n, Hash: h})
	if err != nil {
		b.Fatal(err)
	}
	return signed
}

// benchRecords is the size of the benchmarks' big log: 1 M, or
// COILY_BENCH_RECORDS (a smaller one to profile with).
var benchRecords = func() int {
	if n, err := strconv.Atoi(os.Getenv("COILY_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}()

// BenchmarkVerifyCheckpoint1M is `coily audit verify --checkpoint` of a
// log of 1 M records (the chain, the tree recomputed from the lines, the
// hash file and a consistency proof) against a checkpoint of all of it
// (a witness that is up to date: the lines it covers are hashed, not
// parsed), of half of it, and Verify alone (every line parsed, as before
// the tree), and the server's check at start against the checkpoint its
// state file kept (start-check: the lines hashed, not parsed).
func BenchmarkVerifyCheckpoint1M(b *testing.B) {
	dir := b.TempDir()
	bigLog(b, dir, benchRecords)
	for _, tc := range []struct {
		name  string
		size  int
		start bool // the server's check at start (CheckCheckpoint), not verify
	}{{"checkpoint-at-end", benchRecords, false}, {"checkpoint-at-half", benchRecords / 2, false}, {"chain-only", -1, false},
		{"start-check", benchRecords, true}} {
		b.Run(tc.name, func(b *testing.B) {
			var c Checkpoint
			if tc.size >= 0 {
				var err error
				if c, err = OpenCheckpoint(signAt(b, dir, int64(tc.size)), testVKey); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := cpuTime(b)
			for b.Loop() {
				var rep Report
				var err error
				switch {
				case tc.start:
					err = CheckCheckpoint(dir, c)
					rep.Lines = benchRecords
				case tc.size >= 0:
					var tr TreeReport
					tr, err = VerifyCheckpoint(dir, c)
					rep = tr.Report
				default:
					rep, err = Verify(dir)
				}
				if err != nil || rep.Lines != benchRecords {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(benchRecords), "ns/record")
			// The CPU time it took, all cores: on a machine other work
			// shares, the wall time alone says little.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/float64(benchRecords), "cpu-ns/record")
		})
	}
}

// BenchmarkProve1M is one inclusion proof in a log of 1 M records: the
// proof from the hash file (O(log n) reads, checked), and Prove as `coily
// audit prove` runs it, which also finds the record's line.
func BenchmarkProve1M(b *testing.B) {
	dir := b.TempDir()
	bigLog(b, dir, benchRecords)
	signed := signAt(b, dir, int64(benchRecords/2))
	c, err := OpenCheckpoint(signed, testVKey)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proof", func(b *testing.B) {
		r, closer, err := TreeReader(dir)
		if err != nil {
			b.Fatal(err)
		}
		defer closer.Close()
		i := int64(0)
		for b.Loop() {
			i = (i*7919 + 104729) % c.N
			p, err := tlog.ProveRecord(c.N, i, r)
			if err != nil {
				b.Fatal(err)
			}
			if len(p) == 0 {
				b.Fatal("empty proof")
			}
		}
	})
	b.Run("prove-with-line", func(b *testing.B) {
		seq := uint64(0)
		for b.Loop() {
			seq = (seq*7919+104729)%uint64(c.N) + 1
			if _, err := Prove(dir, seq, signed); err != nil {
				b.Fatal(fmt.Errorf("record %d: %w", seq, err))
			}
		}
	})
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func init() {
	if n := os.Getenv("COILY_BENCH_RECORDS"); n != "" {
		fmt.Sscan(n, &benchRecords)
	}
}
