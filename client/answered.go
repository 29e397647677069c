package client

import "context"

// Which server answered: a client over several servers (each with its own
// audit log) tells a hook in the call's context the name of the server
// that answered a Relay, or an AuditCheckpoint that pins a log, so that
// a caller knows which host's log holds the records a relayed request
// wrote (the bridge's witness counts those its pinned log must show). A
// client over one server never calls it.

type answeredKey struct{}

// WithAnswered returns ctx with the hook told the name of the server
// that answered (Target.Name).
func WithAnswered(ctx context.Context, hook func(server string)) context.Context {
	return context.WithValue(ctx, answeredKey{}, hook)
}

// tellAnswered tells ctx's hook, if any, that server answered.
func tellAnswered(ctx context.Context, server string) {
	if hook, ok := ctx.Value(answeredKey{}).(func(string)); ok && hook != nil {
		hook(server)
	}
}
