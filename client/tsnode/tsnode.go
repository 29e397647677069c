// Package tsnode holds the client transports that run a tailnet node in
// the client's own process: an embedded tsnet node whose state persists,
// so that later commands reuse it instead of joining afresh, and a node on
// a `coily dev` tailnet. Only the full coily binary links it (it carries
// the whole tailnet stack); the lean coily-client dials through the
// operating system's tailscale instead (tailnet.DialServer).
//
// Invariants: a node's state directory is used by one process at a time
// (a lock file); concurrent commands take further directories of a small
// pool, registered ones only when no auth key is given; a node keeps its
// UDP port between commands; nothing is sent to the server before it
// answers a disco ping (it then knows this process's disco key) and the
// control server knows the node's home DERP relay; connections close both
// ways before the node stops; a join is bounded and its error names its
// cause (an unregistered node fails at once); the node's logs go nowhere
// unless asked for, and none is uploaded when a control URL is given.
package tsnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/envknob"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/tsaddr"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/types/logger"

	"coily.dev/coily/client"
)

// Options configure an embedded node.
type Options struct {
	// Server is the coily server's HOST[:PORT] on the tailnet, or
	// several separated by commas (client.NewServers).
	Server     string
	AuthKey    string // needed only to register a node the first time
	ControlURL string // empty: Tailscale's
	// Hostname is this node's name (default coily-client); a pool's
	// further nodes add -2, -3, ….
	Hostname string
	Tags     []string
	// StateDir keeps the nodes' state between commands (default
	// $XDG_STATE_HOME/coily/tsnet, else ~/.local/state/coily/tsnet).
	StateDir string
	// Pool bounds the nodes used at once by concurrent commands (default 4).
	Pool int
	// JoinTimeout bounds joining and reaching the server (default 30 s).
	JoinTimeout time.Duration
	// Logf receives the node's logs (nil: discarded).
	Logf logger.Logf
}

// DefaultStateDir is where embedded nodes keep their state.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "coily", "tsnet")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "coily", "tsnet")
	}
	return filepath.Join(os.TempDir(), "coily-tsnet-"+strconv.Itoa(os.Getuid()))
}

// Dial joins the tailnet with a persistent node (or reuses the one a
// previous command registered), makes sure the server is reachable
// (a disco ping, so the first packet does not wait for path discovery)
// and connects to it. Closing the client stops the node; its state stays.
func Dial(ctx context.Context, o Options) (*client.Client, error) {
	o = o.withDefaults()
	if o.ControlURL != "" {
		envknob.SetNoLogsNoSupport() // a private control server: no log upload to Tailscale
	}
	slot, err := takeSlot(ctx, o.StateDir, o.Pool, o.AuthKey != "")
	if err != nil {
		return nil, &client.DialError{Err: err}
	}
	hostname := o.Hostname
	if slot.n > 0 {
		hostname = fmt.Sprintf("%s-%d", o.Hostname, slot.n+1)
	}
	s := &tsnet.Server{Dir: slot.dir, Hostname: hostname, ControlURL: o.ControlURL, AuthKey: o.AuthKey,
		AdvertiseTags: o.Tags, Port: slot.port(), Logf: o.Logf, UserLogf: o.Logf}
	up := func(ctx context.Context) (*tsnet.Server, error) { return s, bringUp(ctx, s, o.AuthKey != "") }
	return connect(ctx, o, up, func() { s.Close(); slot.release() })
}

func (o Options) withDefaults() Options {
	if o.Hostname == "" {
		o.Hostname = "coily-client"
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.Pool <= 0 {
		o.Pool = 4
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = logger.Discard
	}
	return o
}

// Connect returns a client that reaches server through s, a node that is
// already up: it waits (within timeout) until the server answers a disco
// ping. cleanup runs on failure or Close.
func Connect(ctx context.Context, s *tsnet.Server, server string, timeout time.Duration, cleanup func()) (*client.Client, error) {
	o := Options{Server: server, JoinTimeout: timeout}.withDefaults()
	return connect(ctx, o, func(context.Context) (*tsnet.Server, error) { return s, nil }, cleanup)
}

// connect brings a node up, waits until the server answers a disco ping
// and returns a client dialing through the node; cleanup runs on failure
// or Close.
func connect(ctx context.Context, o Options, up func(context.Context) (*tsnet.Server, error), cleanup func()) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, o.JoinTimeout)
	defer cancel()
	s, err := up(ctx)
	if err != nil {
		cleanup()
		return nil, &client.DialError{Err: joinError(err, o)}
	}
	var tracked conns
	if servers := strings.Split(o.Server, ","); len(servers) > 1 {
		return client.NewServers(targets(s, servers, &tracked, o.Logf), func() { tracked.wait(); cleanup() }), nil
	}
	host, port := splitServer(o.Server)
	start := time.Now()
	ip, err := reach(ctx, s, host)
	if err != nil {
		cleanup()
		return nil, &client.DialError{Err: err}
	}
	o.Logf("tsnode: server %s (%v) answered a disco ping %v after the node was up", host, ip, time.Since(start).Round(time.Millisecond))
	addr := net.JoinHostPort(ip.String(), port)
	return client.New(tracked.dial(s.Dial, addr), addr, func() { tracked.wait(); cleanup() }), nil
}

// targets are several servers through s: each is reached (a disco ping)
// when the client first connects to it, so a server that is down costs
// its connect timeout only when the client tries it (client.NewServers
// starts from the last one that answered).
func targets(s *tsnet.Server, servers []string, tracked *conns, logf func(string, ...any)) []client.Target {
	var out []client.Target
	for _, server := range servers {
		host, port := splitServer(server)
		out = append(out, client.Target{Name: net.JoinHostPort(host, port), Dial: func(ctx context.Context) (net.Conn, error) {
			ip, err := reach(ctx, s, host)
			if err != nil {
				return nil, err
			}
			logf("tsnode: server %s (%v) answered a disco ping", host, ip)
			return tracked.dial(s.Dial, net.JoinHostPort(ip.String(), port))(ctx)
		}})
	}
	return out
}

// joinError says why a join failed, in words an operator acts on.
func joinError(err error, o Options) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		where := "Tailscale's coordination server"
		if o.ControlURL != "" {
			where = o.ControlURL
		}
		return fmt.Errorf("could not join the tailnet within %s: no answer from %s (is it reachable? is the auth key valid and not expired?): %w", o.JoinTimeout, where, err)
	case errors.Is(err, ErrNotRegistered):
		return err
	}
	return fmt.Errorf("could not join the tailnet: %w", err)
}

// splitServer splits HOST[:PORT], the port defaulting to coily's; a
// Service's name (svc:NAME[:PORT]) keeps its prefix.
func splitServer(server string) (host, port string) {
	if name, ok := strings.CutPrefix(server, "svc:"); ok {
		host, port := splitServer(name)
		return "svc:" + host, port
	}
	if h, p, err := net.SplitHostPort(server); err == nil {
		return h, p
	}
	return server, strconv.Itoa(client.DefaultPort)
}

// Disco pings before the first packet to the server.
const (
	// pingEvery starts another disco ping: the server ignores them until
	// the control server has told it this process's disco key (new at
	// every start), so they are repeated often rather than waited on.
	pingEvery = 25 * time.Millisecond
	// pingTimeout bounds one disco ping (a slow path still answers).
	pingTimeout = 3 * time.Second
)

// reach finds the server's tailnet address (host may be an address, a
// MagicDNS name or its first label, or a Service) and disco-pings it until it answers,
// so the first connection does not wait for path discovery. The answer
// also proves that the server knows this process's disco key (new at every
// start): until it does, it ignores the pings, and it would reset a
// WireGuard session begun before. A ping starts every pingEvery, each
// waiting up to pingTimeout, so a ping lost to that wait costs little.
func reach(ctx context.Context, s *tsnet.Server, host string) (netip.Addr, error) {
	lc, err := s.LocalClient()
	if err != nil {
		return netip.Addr{}, err
	}
	waitDERPHomeKnown(ctx, lc)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan netip.Addr, 1)
	var mu sync.Mutex
	var last error
	note := func(err error) { mu.Lock(); last = err; mu.Unlock() }
	tick := time.NewTicker(pingEvery)
	defer tick.Stop()
	for {
		if dial, peer, err := lookup(ctx, lc, host); err != nil {
			note(err)
		} else {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, pingTimeout)
				defer cancel()
				if _, err := lc.Ping(pctx, peer, tailcfg.PingDisco); err != nil {
					note(err)
					return
				}
				select {
				case answered <- dial:
				default:
				}
			})
		}
		select {
		case ip := <-answered:
			return ip, nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return netip.Addr{}, fmt.Errorf("server %s not reachable on the tailnet: %v", host, errors.Join(last, ctx.Err()))
		case <-tick.C:
		}
	}
}

// lookup resolves host against the node's view of the tailnet: the
// address to dial and the peer to disco-ping (resolve).
func lookup(ctx context.Context, lc *local.Client, host string) (dial, peer netip.Addr, err error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, ip, nil
	}
	st, err := lc.Status(ctx)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	return resolve(st, func() (*tailcfg.DNSConfig, error) { return lc.DNSConfig(ctx) }, host)
}

// resolve finds host in st: a peer (its MagicDNS name, or the first label
// of it) is both the address to dial and the peer to ping; a Tailscale
// Service (svc:NAME, or a DNS name the tailnet's records give a Service
// address) is dialled at its virtual IP, through the peer that routes it
// now (tsservice). Names are matched only as the control server assigned
// them, never by the host name a peer reports for itself: a peer calling
// itself "coily" or "svc:coily" is not the server. A svc: name is only
// ever a Service.
func resolve(st *ipnstate.Status, dnsConfig func() (*tailcfg.DNSConfig, error), host string) (dial, peer netip.Addr, err error) {
	service := strings.HasPrefix(host, "svc:")
	if !service {
		if ip, ok := peerNamed(st, host); ok {
			return ip, ip, nil
		}
	}
	dns, err := dnsConfig()
	if err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	if vip, ok := serviceIP(dns, st, host); ok {
		if p, ok := routedBy(st, vip); ok {
			return vip, p, nil
		}
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("no peer serves the Service %s (%v) now", host, vip)
	}
	return netip.Addr{}, netip.Addr{}, fmt.Errorf("no peer or Service called %s on the tailnet (yet)", host)
}

// peerNamed finds the peer whose control-assigned MagicDNS name is host,
// or begins with host and a dot.
func peerNamed(st *ipnstate.Status, host string) (netip.Addr, bool) {
	want := strings.TrimSuffix(strings.ToLower(host), ".")
	if want == "" {
		return netip.Addr{}, false
	}
	for _, p := range st.Peer {
		dns := strings.TrimSuffix(strings.ToLower(p.DNSName), ".")
		if (dns == want || strings.HasPrefix(dns, want+".")) && len(p.TailscaleIPs) > 0 {
			return p.TailscaleIPs[0], true
		}
	}
	return netip.Addr{}, false
}

// serviceIP finds a Service's virtual IP in the tailnet's DNS records:
// host is svc:NAME or NAME.<tailnet suffix>.
func serviceIP(dns *tailcfg.DNSConfig, st *ipnstate.Status, host string) (netip.Addr, bool) {
	if dns == nil || st.CurrentTailnet == nil {
		return netip.Addr{}, false
	}
	suffix := strings.TrimSuffix(strings.ToLower(st.CurrentTailnet.MagicDNSSuffix), ".")
	want := strings.TrimSuffix(strings.ToLower(host), ".")
	if label, ok := strings.CutPrefix(want, "svc:"); ok {
		want = label + "." + suffix
	}
	if !strings.HasSuffix(want, "."+suffix) {
		return netip.Addr{}, false
	}
	for _, r := range dns.ExtraRecords {
		if strings.TrimSuffix(strings.ToLower(r.Name), ".") != want || (r.Type != "" && r.Type != "A" && r.Type != "AAAA") {
			continue
		}
		if ip, err := netip.ParseAddr(r.Value); err == nil && tsaddr.IsTailscaleIP(ip) {
			return ip, true // a Service's address is the tailnet's own, never a LAN's behind a router
		}
	}
	return netip.Addr{}, false
}

// routedBy finds the peer the tailnet routes ip to now.
func routedBy(st *ipnstate.Status, ip netip.Addr) (netip.Addr, bool) {
	for _, p := range st.Peer {
		if p.PrimaryRoutes == nil || len(p.TailscaleIPs) == 0 {
			continue
		}
		for _, r := range p.PrimaryRoutes.All() {
			if r.Contains(ip) {
				return p.TailscaleIPs[0], true
			}
		}
	}
	return netip.Addr{}, false
}
