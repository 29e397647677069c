// Package tsservice serves a Tailscale Service (one name, and its virtual
// IPs, that several tagged hosts share) from a tsnet node, so that clients
// reach whichever host of a fleet is up by one name.
//
// tsnet's own ListenService forwards each connection to a TCP listener on
// the host's loopback: any local process (a sandboxed command reaching
// loopback through a proxy, or another user's) could connect there too,
// and the connection's source would be 127.0.0.1, not the tailnet peer.
// This package opens no socket at all. It advertises the Service, marks
// its port as served with an empty handler (which makes the node take the
// Service's packets into its own network stack and hand nothing on), and
// listens on the Service's virtual IPs themselves, in the node's network
// stack: a connection is accepted only from the tailnet, and its remote
// address is the peer's own tailnet address, so the caller is identified
// by WhoIs exactly as on the node's own address.
//
// Invariants:
//   - no listener on the host's network (loopback included) is opened;
//   - only a connection to one of the Service's virtual IPs, on its port,
//     reaches the listener; its RemoteAddr is the peer's tailnet address;
//   - Close withdraws what Listen added (the port's handler and, where
//     Listen added it, the advertisement), and nothing else.
package tsservice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"tailscale.com/ipn"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
)

// ErrUntagged reports a node without tags: the tailnet lets only tagged
// nodes host a Service.
var ErrUntagged = errors.New("tsservice: a Service host must be a tagged node (--advertise-tags / an auth key with tags)")

// ErrNoVIP reports a Service the tailnet has not given this node: it is not
// defined in the tailnet's policy, or this node is not approved to host it.
var ErrNoVIP = errors.New("tsservice: the tailnet gives this node no address for the Service (define it in the tailnet policy and approve this host)")

// Listener accepts the Service's connections.
type Listener struct {
	node   *tsnet.Server
	name   tailcfg.ServiceName
	port   uint16
	fqdn   string
	lns    []net.Listener
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	added  bool // Listen added the advertisement
}

// ParseName checks a Service name as the CLI takes it ("svc:coily"): the
// tailnet's own rules (tailcfg.ServiceName.Validate).
func ParseName(s string) (tailcfg.ServiceName, error) {
	n := tailcfg.ServiceName(s)
	if err := n.Validate(); err != nil {
		return "", fmt.Errorf("tsservice: service name %q: %w", s, err)
	}
	// The tailnet takes any case; its DNS names are lower case, and so is
	// the name a client dials.
	if label := n.WithoutPrefix(); strings.ToLower(label) != label {
		return "", fmt.Errorf("tsservice: service name %q: not lower case", s)
	}
	return n, nil
}

// Listen serves the Service name on port from node, which must be up and
// tagged, and to which the tailnet has given the Service's virtual IPs.
func Listen(ctx context.Context, node *tsnet.Server, name string, port uint16) (*Listener, error) {
	svc, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		return nil, errors.New("tsservice: port 0")
	}
	lc, err := node.LocalClient()
	if err != nil {
		return nil, fmt.Errorf("tsservice: %w", err)
	}
	st, err := lc.StatusWithoutPeers(ctx)
	if err != nil {
		return nil, fmt.Errorf("tsservice: status: %w", err)
	}
	if st.Self == nil || st.Self.Tags == nil || st.Self.Tags.Len() == 0 {
		return nil, ErrUntagged
	}
	vips, err := serviceVIPs(st.Self.CapMap, svc)
	if err != nil {
		return nil, err
	}
	l := &Listener{node: node, name: svc, port: port, conns: make(chan net.Conn), closed: make(chan struct{})}
	if st.CurrentTailnet != nil {
		l.fqdn = svc.WithoutPrefix() + "." + st.CurrentTailnet.MagicDNSSuffix
	}
	if err := l.open(ctx, vips); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// open listens on every virtual IP in the node's stack, then marks the
// port served and advertises the Service: no packet is taken in before
// a listener is there to take it.
func (l *Listener) open(ctx context.Context, vips []netip.Addr) error {
	for _, ip := range vips {
		ln, err := l.node.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(l.port))))
		if err != nil {
			return fmt.Errorf("tsservice: listen on %s: %w", ip, err)
		}
		l.lns = append(l.lns, ln)
		l.wg.Add(1)
		go l.accept(ln)
	}
	if err := l.serve(ctx); err != nil {
		return err
	}
	return l.advertise(ctx)
}

// serve marks the port as served with an empty handler: the node then
// takes the Service's packets for that port into its stack, where no
// handler claims them and the listener on the virtual IP does.
func (l *Listener) serve(ctx context.Context) error {
	lc, err := l.node.LocalClient()
	if err != nil {
		return err
	}
	sc, err := lc.GetServeConfig(ctx)
	if err != nil {
		return fmt.Errorf("tsservice: serve config: %w", err)
	}
	if sc == nil {
		sc = new(ipn.ServeConfig)
	}
	if c := sc.Services[l.name]; c != nil && c.TCP[uint16(l.port)] != nil {
		return fmt.Errorf("tsservice: %s port %d is already served on this node", l.name, l.port)
	}
	c := sc.Services[l.name]
	if c == nil {
		c = new(ipn.ServiceConfig)
		if sc.Services == nil {
			sc.Services = map[tailcfg.ServiceName]*ipn.ServiceConfig{}
		}
		sc.Services[l.name] = c
	}
	if c.TCP == nil {
		c.TCP = map[uint16]*ipn.TCPPortHandler{}
	}
	c.TCP[l.port] = &ipn.TCPPortHandler{} // no forward, no HTTP: nothing but the stack's own listener
	if err := lc.SetServeConfig(ctx, sc); err != nil {
		return fmt.Errorf("tsservice: serve config: %w", err)
	}
	return nil
}

func (l *Listener) advertise(ctx context.Context) error {
	lc, err := l.node.LocalClient()
	if err != nil {
		return err
	}
	prefs, err := lc.GetPrefs(ctx)
	if err != nil {
		return fmt.Errorf("tsservice: prefs: %w", err)
	}
	if slices.Contains(prefs.AdvertiseServices, l.name.String()) {
		return nil
	}
	adv := append(slices.Clone(prefs.AdvertiseServices), l.name.String())
	if _, err := lc.EditPrefs(ctx, &ipn.MaskedPrefs{AdvertiseServicesSet: true, Prefs: ipn.Prefs{AdvertiseServices: adv}}); err != nil {
		return fmt.Errorf("tsservice: advertise %s: %w", l.name, err)
	}
	l.added = true
	return nil
}

// serviceVIPs reads the Service's virtual IPs from the node's
// service-host capability.
func serviceVIPs(cm tailcfg.NodeCapMap, svc tailcfg.ServiceName) ([]netip.Addr, error) {
	maps, err := tailcfg.UnmarshalNodeCapJSON[tailcfg.ServiceIPMappings](cm, tailcfg.NodeAttrServiceHost)
	if err != nil {
		return nil, fmt.Errorf("tsservice: service-host capability: %w", err)
	}
	var out []netip.Addr
	for _, m := range maps {
		for _, ip := range m[svc] {
			if ip.IsValid() && !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoVIP
	}
	return out, nil
}

func (l *Listener) accept(ln net.Listener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		select {
		case l.conns <- c:
		case <-l.closed:
			c.Close()
			return
		}
	}
}

// Accept returns the next connection to the Service.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and withdraws what Listen added.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		for _, ln := range l.lns {
			ln.Close()
		}
		l.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
		defer cancel()
		err = l.withdraw(ctx)
	})
	return err
}

// Addr is the Service's name and port.
func (l *Listener) Addr() net.Addr { return addr(l.FQDN() + ":" + strconv.Itoa(int(l.port))) }

// FQDN is the Service's DNS name on the tailnet (name.tailnet-suffix).
func (l *Listener) FQDN() string {
	if l.fqdn == "" {
		return l.name.WithoutPrefix()
	}
	return l.fqdn
}

type addr string

func (addr) Network() string  { return "tcp" }
func (a addr) String() string { return string(a) }
