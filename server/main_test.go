package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server test must leave no goroutine behind: streams, runners,
// escalations and connections all end with the test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
