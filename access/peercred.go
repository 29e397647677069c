package access

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// localPeer is the AuthInfo of a local-socket connection: the kernel's
// record of who connected, and that uid's user and groups as the host's
// user database had them when the connection was made.
type localPeer struct {
	credentials.CommonAuthInfo
	UID, GID, PID int
	User          string
	Groups        []string
	// LookupErr is why the user could not be resolved, if it could not.
	LookupErr error
}

// AuthType implements credentials.AuthInfo.
func (localPeer) AuthType() string { return "peercred" }

// PeerCredentials are the gRPC server's transport credentials. On a unix
// socket they read the peer's credentials from the kernel (SO_PEERCRED)
// and resolve the uid with users once per connection; whether that user is
// a local operator is decided per call (Admit), against the policy in
// force. Other connections pass through unidentified, to be identified by
// WhoIs (Gate.Tailnet) or refused.
func PeerCredentials(users UserLookup) credentials.TransportCredentials {
	return peerCredentials{users: users}
}

type peerCredentials struct {
	users UserLookup
}

func (peerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("peerCredentials: server side only")
}

func (c peerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return conn, unidentified{}, nil
	}
	p, err := readPeerCred(uc)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("read peer credentials: %w", err)
	}
	p.User, p.Groups, p.LookupErr = c.users.LookupUID(p.UID)
	p.SecurityLevel = credentials.PrivacyAndIntegrity
	return conn, p, nil
}

func (peerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (c peerCredentials) Clone() credentials.TransportCredentials { return c }

func (peerCredentials) OverrideServerName(string) error { return nil }

// unidentified is the AuthInfo of a connection no transport vouched for.
type unidentified struct{ credentials.CommonAuthInfo }

func (unidentified) AuthType() string { return "none" }

type localConnKey struct{}

// LocalConnContext is the ConnContext of an HTTP server on a local
// socket: it reads the peer's credentials from the kernel once per
// connection, as PeerCredentials does for gRPC, and Admit identifies the
// connection's requests by them. A connection that is not a unix socket's,
// or whose credentials cannot be read, carries none (and is identified, or
// refused, as a tailnet peer).
func LocalConnContext(users UserLookup) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, conn net.Conn) context.Context {
		uc, ok := conn.(*net.UnixConn)
		if !ok {
			return ctx
		}
		p, err := readPeerCred(uc)
		if err != nil {
			return ctx
		}
		p.User, p.Groups, p.LookupErr = users.LookupUID(p.UID)
		return context.WithValue(ctx, localConnKey{}, p)
	}
}
