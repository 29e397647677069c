// Package httpserve holds the server's HTTP servers (the web console's,
// the operations endpoints'): an http.Server under Limits (timeouts,
// header size) whose connections can be capped per peer address, each
// refusal of a connection past the cap counted and audited
// (peerconns.go).
package httpserve

import (
	"context"
	"net/http"
	"time"
)

// Limits bound one of the server's HTTP servers (the web console's,
// the operations endpoints'), so that no peer holds a connection, or a
// goroutine, for long without being answered:
//
//   - ReadHeaderTimeout bounds a request's line and headers (and a TLS
//     handshake), ReadTimeout the whole request, body included. Once a
//     request is read, net/http lifts the read deadline (it only watches
//     for the client going away), so a long-lived GET, such as the
//     console's event streams, is not cut short by it;
//   - WriteTimeout bounds writing the answer, from the end of the
//     request's headers (the console's: from the end of its body; an
//     event stream's: each event);
//   - IdleTimeout bounds a kept-alive connection between requests;
//   - MaxHeaderBytes bounds the headers;
//   - PeerConns caps the connections one peer address holds open at once:
//     past it a new connection is closed as soon as it is accepted, and
//     the refusal is audited (peerconns.go).
//
// A zero field takes the default's value.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	PeerConns         int
}

// DefaultWebLimits are the web console's limits. A browser opens at
// most six connections to a host; a page holds two event streams.
var DefaultWebLimits = Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second,
	WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, PeerConns: 16}

// DefaultOpsLimits are the operations endpoints' limits. A Prometheus
// keeps one connection to its target.
var DefaultOpsLimits = Limits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
	WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10, PeerConns: 8}

// Or returns l with each zero field taken from def.
func (l Limits) Or(def Limits) Limits {
	pick := func(v, d time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return d
	}
	out := Limits{ReadHeaderTimeout: pick(l.ReadHeaderTimeout, def.ReadHeaderTimeout),
		ReadTimeout: pick(l.ReadTimeout, def.ReadTimeout), WriteTimeout: pick(l.WriteTimeout, def.WriteTimeout),
		IdleTimeout: pick(l.IdleTimeout, def.IdleTimeout), MaxHeaderBytes: l.MaxHeaderBytes, PeerConns: l.PeerConns}
	if out.MaxHeaderBytes <= 0 {
		out.MaxHeaderBytes = def.MaxHeaderBytes
	}
	if out.PeerConns <= 0 {
		out.PeerConns = def.PeerConns
	}
	return out
}

// Server is an http.Server under Limits whose connections are capped
// per peer. Set its BaseContext and ErrorLog before serving, not its
// ConnState (the cap's).
type Server struct {
	*http.Server
	peers *peerConns // nil: no cap
}

// New serves h under lim; with a cap, the connections each peer holds
// are capped at lim.PeerConns, and a refusal counted and audited as cap
// says. Without one (nil), no peer is capped.
func New(h http.Handler, lim Limits, capped *Cap) *Server {
	hs := &Server{Server: &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout: lim.ReadTimeout, WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: lim.MaxHeaderBytes}}
	if capped != nil {
		hs.peers = newPeerConns(*capped, lim.PeerConns)
		hs.ConnState = hs.peers.connState
	}
	return hs
}

// Shutdown shuts the server down as http.Server.Shutdown does, then
// records the connection refusals counted and not yet recorded.
func (h *Server) Shutdown(ctx context.Context) error {
	err := h.Server.Shutdown(ctx)
	h.peers.close()
	return err
}

// Close closes the server as http.Server.Close does, then records the
// connection refusals counted and not yet recorded.
func (h *Server) Close() error {
	err := h.Server.Close()
	h.peers.close()
	return err
}

// HangUp makes the answer a handler is about to write the last of its
// connection, and reads nothing more of it: the request's body, if any,
// is never read (not even the part the server would drain to reuse the
// connection). For refusals of requests that were not admitted.
func HangUp(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now()) // a recorder has none: nothing to read anyway
}
