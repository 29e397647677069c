package folder

import (
	"context"

	"coily.dev/coily/descriptor"
	"coily.dev/coily/refusal"
)

// Exchange sends one git exchange (a smart HTTP request of git's for the
// git proxy, docs/protocol.md §4.5) through the shared folder and returns
// the proxy's answer, or a *refusal.Error. It waits until ctx ends (a
// push may wait for a human's approval), then tears the exchange down.
// Nothing is retried: a push must not be sent twice.
func (c *Client) Exchange(ctx context.Context, g *descriptor.GitExchange) (*descriptor.GitAnswer, error) {
	d := &descriptor.Request{ID: descriptor.NewID(), CreatedAt: c.now(), Nonce: newNonce(), Sandbox: c.Key.Sandbox, Git: g}
	resp, err := c.send(ctx, d, 0)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.Outcome == descriptor.OutcomeRefused:
		return nil, &refusal.Error{Code: refusal.Code(resp.Code), Msg: resp.Message, AuditID: resp.AuditID}
	case resp.Outcome != descriptor.OutcomeHTTP || resp.Git == nil:
		return nil, refusal.New(refusal.Internal, "coily's bridge answered a git exchange with a %q response", resp.Outcome)
	}
	return resp.Git, nil
}
