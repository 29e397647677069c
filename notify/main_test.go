package notify_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every dispatcher test leaves no goroutine behind: workers, retries and
// subscriptions end with the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
