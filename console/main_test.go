package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every console test must leave no goroutine behind: streams end with the
// console or the server, and the browser's with its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
