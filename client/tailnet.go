package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"tailscale.com/tsnet"

	"coily.dev/coily/internal/devnet"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// DefaultPort is the port coily serves gRPC on over the tailnet.
const DefaultPort = 7443

// joinTimeout bounds joining a tailnet as a client node.
const joinTimeout = 30 * time.Second

// hostPort adds DefaultPort to a bare host.
func hostPort(server string) string {
	if _, _, err := net.SplitHostPort(server); err == nil {
		return server
	}
	return net.JoinHostPort(server, strconv.Itoa(DefaultPort))
}

// DialServer connects to a coily server over the operating system's
// tailscale, as plain TCP to its MagicDNS name (WireGuard encrypts and
// authenticates the link; the server identifies this node with WhoIs).
func DialServer(server string) (*Client, error) {
	conn, err := grpc.NewClient("dns:///"+hostPort(server), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", server, err)
	}
	return newClient(conn, nil), nil
}

// TSNetOptions configure a client that joins the tailnet itself.
type TSNetOptions struct {
	Server     string // HOST[:PORT] on the tailnet
	AuthKey    string
	ControlURL string // empty: Tailscale's
	Hostname   string // empty: coily-client
	Tags       []string
	// Dev marks a coily dev tailnet: offline settings apply.
	Dev bool
}

// DialTSNet joins the tailnet as an ephemeral node (for containers and CI
// runners without tailscaled) and connects to the server through it. The
// node leaves the tailnet when the client is closed.
func DialTSNet(ctx context.Context, o TSNetOptions) (*Client, error) {
	dir, err := os.MkdirTemp("", "coily-tsnet-")
	if err != nil {
		return nil, fmt.Errorf("client: tsnet state: %w", err)
	}
	hostname := o.Hostname
	if hostname == "" {
		hostname = "coily-client"
	}
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	var s *tsnet.Server
	if o.Dev {
		s, err = devnet.Join(ctx, o.ControlURL, devnet.NodeOptions{Dir: dir, Hostname: hostname, Tags: o.Tags, Ephemeral: true})
	} else {
		s = &tsnet.Server{Dir: dir, Hostname: hostname, ControlURL: o.ControlURL, AuthKey: o.AuthKey,
			Ephemeral: true, AdvertiseTags: o.Tags, Logf: func(string, ...any) {}}
		_, err = s.Up(ctx)
	}
	cleanup := func() {
		if s != nil {
			s.Close()
		}
		os.RemoveAll(dir)
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("client: join the tailnet: %w", err)
	}
	host, _, _ := net.SplitHostPort(hostPort(o.Server))
	if err := devnet.WaitReachable(ctx, s, host); err != nil && o.Dev {
		cleanup()
		return nil, err
	}
	conn, err := grpc.NewClient("passthrough:///"+hostPort(o.Server),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return s.Dial(ctx, "tcp", addr) }))
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("client: dial %s: %w", o.Server, err)
	}
	return newClient(conn, cleanup), nil
}

// DevInfo is what `coily dev` writes to DIR/dev.json for its clients.
type DevInfo struct {
	ControlURL string `json:"control_url"`
	Server     string `json:"server"` // HOST:PORT on the dev tailnet
	Socket     string `json:"socket"`
}

// DevInfoFile is the file name of DevInfo in a dev state directory.
const DevInfoFile = "dev.json"

// ReadDevInfo reads DIR/dev.json.
func ReadDevInfo(dir string) (DevInfo, error) {
	var d DevInfo
	data, err := os.ReadFile(filepath.Join(dir, DevInfoFile))
	if err != nil {
		return d, fmt.Errorf("no coily dev running with state dir %s (start one with `coily dev --state-dir %s`): %w", dir, dir, err)
	}
	if err := json.Unmarshal(data, &d); err != nil || d.ControlURL == "" || d.Server == "" {
		return d, errors.Join(errors.New("malformed "+DevInfoFile), err)
	}
	return d, nil
}

// DialDev joins the dev tailnet of `coily dev --state-dir dir` as a node
// tagged tag:<as> and connects to its server.
func DialDev(ctx context.Context, dir, as string) (*Client, error) {
	info, err := ReadDevInfo(dir)
	if err != nil {
		return nil, err
	}
	return DialTSNet(ctx, TSNetOptions{Server: info.Server, ControlURL: info.ControlURL, Dev: true,
		Hostname: "coily-" + as, Tags: []string{"tag:" + as}})
}

func newClient(conn *grpc.ClientConn, cleanup func()) *Client {
	return &Client{conn: conn, API: coilyv1.NewCoilyServiceClient(conn), RateLimitRetries: 3,
		MaxRetryDelay: 30 * time.Second, cleanup: cleanup}
}
