package main

import (
	"errors"
	"fmt"
	"io"

	"coily.dev/coily/client"
	"coily.dev/coily/refusal"
)

// dial connects to the server the global flags name.
func dial(e *env) (*client.Client, error) {
	return client.DialLocal(e.global.socketPath())
}

// refused prints a refusal the one way the CLI does and returns the exit
// code for it.
func refused(w io.Writer, err error) int {
	var r *refusal.Error
	if !errors.As(err, &r) {
		r = refusal.FromStatus(err)
	}
	fmt.Fprintf(w, "coily: refused (%s): %s\n", r.Code, r.Msg)
	return client.RefusedExit
}
