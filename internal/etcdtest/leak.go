package etcdtest

import "go.uber.org/goleak"

// IgnoreLeaks are the goleak options for a package that runs a cluster.
// The members' peer connections are HTTP streams between two servers of
// one process; closing the members can leave a pair of them waiting on
// each other (the client side's read and write loops, the server side
// aborting its pending read), which no API of the embedded server
// reaches. They hold only loopback sockets and end with the process.
func IgnoreLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).abortPendingRead"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}
}
