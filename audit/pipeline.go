package audit

import (
	"path/filepath"
	"runtime"
	"sync"
)

// A parsing job holds at most batchLines lines and, unless it is one
// line, batchBytes of them: the pipeline holds 3×GOMAXPROCS+1 jobs at
// most, so lines of up to 16 MiB each would otherwise hold gigabytes.
const (
	batchLines = 256
	batchBytes = 8 << 20
)

// sentBatch, when set (tests), is told every batch the reader sends.
var sentBatch func(*lineBatch)

// lineBatch is a run of consecutive lines of one file, parsed by a worker.
type lineBatch struct {
	path  string
	first int // line number of lines[0]
	// skip is how many of the lines, from the first, are trusted: not
	// parsed (verifyPipeline's trusted).
	skip  int
	lines [][]byte
	size  int // bytes in lines
	recs  []Record
	hash  []string
	errs  []error
	// readErr ends the walk after these lines (a torn or overlong line,
	// a read error).
	readErr error
	done    chan struct{}
}

func (b *lineBatch) parse() {
	b.recs, b.hash, b.errs = make([]Record, len(b.lines)), make([]string, len(b.lines)), make([]error, len(b.lines))
	for i, l := range b.lines[b.skip:] {
		b.recs[b.skip+i], b.hash[b.skip+i], b.errs[b.skip+i] = parseLine(l)
	}
	close(b.done)
}

// verifyPipeline reads every line of files in order, parses them on
// GOMAXPROCS workers, and calls check with each line, in order, with what
// parseLine returned for it (parsed false, and nothing parsed, for the
// first trusted lines of the log). It stops at the first error check
// returns, or that reading returns after the lines before it were checked.
func verifyPipeline(dir string, files []logFile, trusted int64, check func(path string, n int, b []byte, parsed bool, rec Record, h string, perr error) error) error {
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *lineBatch, workers)
	ordered := make(chan *lineBatch, 2*workers)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range jobs {
				b.parse()
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(jobs)
		send := func(b *lineBatch) bool {
			if sentBatch != nil {
				sentBatch(b)
			}
			select {
			case <-quit:
				return false
			default:
			}
			select {
			case ordered <- b:
			case <-quit:
				return false
			}
			jobs <- b // ordered holds at most 2×workers: this never waits long
			return true
		}
		var seen int64
		for _, lf := range files {
			path := filepath.Join(dir, lf.name)
			b := &lineBatch{path: path, first: 1, done: make(chan struct{})}
			err := eachLine(path, func(n int, line []byte) error {
				if len(b.lines) == batchLines || (len(b.lines) > 0 && b.size+len(line) > batchBytes) {
					if !send(b) {
						return errStop
					}
					b = &lineBatch{path: path, first: n, done: make(chan struct{})}
				}
				b.lines, b.size = append(b.lines, append([]byte(nil), line...)), b.size+len(line)
				if seen++; seen <= trusted {
					b.skip++
				}
				return nil
			})
			b.readErr = err
			if !send(b) || err != nil {
				return
			}
		}
	}()
	defer func() {
		close(quit)
		for range ordered { // let the reader end
		}
		wg.Wait()
	}()
	for b := range ordered {
		<-b.done
		for i, l := range b.lines {
			if err := check(b.path, b.first+i, l, i >= b.skip, b.recs[i], b.hash[i], b.errs[i]); err != nil {
				return err
			}
		}
		if b.readErr != nil {
			return b.readErr
		}
	}
	return nil
}
