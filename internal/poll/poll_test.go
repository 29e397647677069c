package poll

import (
	"fmt"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	n := 0
	if !Within(10*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("asked %d times before the condition held", n)
	}
	start := time.Now()
	if Within(100*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %s, want about 100ms", d)
	}
	calls := 0
	if !Within(0, func() bool { calls++; return true }) || calls != 1 {
		t.Fatal("a condition that holds at once is asked once")
	}
}

// fatal records Fatalf instead of ending the test.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper()                        {}
func (f *fatal) Fatalf(format string, a ...any) { f.msg = fmt.Sprintf(format, a...) }

func TestUntilFails(t *testing.T) {
	f := &fatal{TB: t}
	Until(f, 20*time.Millisecond, "nothing", func() bool { return false })
	if f.msg != "timed out after 20ms waiting for nothing" {
		t.Fatalf("Until of a condition that never held: %q", f.msg)
	}
	f.msg = ""
	Until(f, time.Second, "something", func() bool { return true })
	if f.msg != "" {
		t.Fatalf("Until of a condition that held: %q", f.msg)
	}
}
