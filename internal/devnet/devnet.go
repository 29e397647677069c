// Package devnet runs a private tailnet on loopback, offline: Tailscale's
// test control server, a DERP relay and a STUN responder, all on
// 127.0.0.1, and tsnet nodes joined to it. Tests use it for real tailnet
// identity; `coily dev` uses it to run the whole system on one machine.
//
// It is not a production control plane: any node may register, and any
// node may claim any tag the net's tag owners list. Nothing it starts
// listens beyond loopback or dials out (see the knobs in Start).
package devnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"tailscale.com/derp/derpserver"
	"tailscale.com/envknob"
	"tailscale.com/net/netns"
	"tailscale.com/net/stun"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
	"tailscale.com/types/logger"
)

// MagicDNSDomain is the dev tailnet's DNS suffix.
const MagicDNSDomain = "coily-dev.ts.net"

// offlineKnobs keep every node on loopback and away from Tailscale's
// public services. Some are read when the packages load; envknob.Setenv
// also updates those.
var offlineKnobs = map[string]string{
	"TS_NO_LOGS_NO_SUPPORT":         "true", // no log uploads
	"TS_ASSUME_NETWORK_UP_FOR_TEST": "1",    // only loopback: don't wait for a "real" network
	"TS_DEBUG_OMIT_LOCAL_ADDRS":     "1",    // direct paths on 127.0.0.1, not the host's addresses
	"TS_DISABLE_PORTMAPPER":         "1",
	"TS_PANIC_IF_HIT_MAIN_CONTROL":  "1",
}

var knobsOnce sync.Once

// SetOfflineKnobs applies the offline settings to this process. Start
// calls it; a process that only joins a dev net (a client) must call it
// before starting its node.
func SetOfflineKnobs() {
	knobsOnce.Do(func() {
		// The dev tailnet lives on loopback. Where a node cannot mark its
		// sockets (SO_MARK needs CAP_NET_ADMIN: any unprivileged user),
		// tailscale binds them to the default route's interface instead,
		// and a STUN probe to 127.0.0.1 then never hears back: every
		// unprivileged node waited out netcheck, 3 s, before its first
		// packet. Nothing here needs to leave by another route.
		netns.SetEnabled(false)
		for k, v := range offlineKnobs {
			if v != "" {
				envknob.Setenv(k, v)
			}
		}
	})
}

// OfflineEnv returns the offline settings as environment entries, for
// processes started to join a dev net.
func OfflineEnv() []string {
	out := make([]string, 0, len(offlineKnobs))
	for k, v := range offlineKnobs {
		out = append(out, k+"="+v)
	}
	return out
}

// Net is a running private tailnet.
type Net struct {
	ControlURL string
	Control    *testcontrol.Server
	DERPMap    *tailcfg.DERPMap

	closers []func()
}

// Tags every dev net lets nodes claim.
var Tags = []string{"tag:coily", "tag:owner", "tag:agent", "tag:stranger", "tag:bridge", "tag:capped"}

// Start starts control, DERP and STUN on 127.0.0.1.
func Start(logf logger.Logf) (*Net, error) {
	SetOfflineKnobs()
	if logf == nil {
		logf = logger.Discard
	}
	n := &Net{}
	derpMap, err := n.startDERPAndSTUN(logf)
	if err != nil {
		n.Close()
		return nil, err
	}
	owners := map[string][]string{}
	for _, t := range Tags {
		owners[t] = nil
	}
	n.DERPMap = derpMap
	n.Control = &testcontrol.Server{
		DERPMap:        derpMap,
		DNSConfig:      &tailcfg.DNSConfig{Proxied: true},
		MagicDNSDomain: MagicDNSDomain,
		TagOwners:      owners,
		AllOnline:      true,
		Logf:           logf,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("devnet: control listener: %w", err)
	}
	srv := httptest.NewUnstartedServer(controlRoutes(n.Control))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(logWriter{logf}, "", 0)
	n.Control.HTTPTestServer = srv
	srv.Start()
	n.closers = append(n.closers, srv.Close)
	n.ControlURL = srv.URL
	return n, nil
}

// Close stops everything Start started.
func (n *Net) Close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
}

func (n *Net) startDERPAndSTUN(logf logger.Logf) (*tailcfg.DERPMap, error) {
	d := derpserver.New(key.NewNode(), logf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devnet: DERP listener: %w", err)
	}
	srv := httptest.NewUnstartedServer(derpserver.Handler(d))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(logWriter{logf}, "", 0)
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	srv.StartTLS()
	n.closers = append(n.closers, func() { srv.CloseClientConnections(); srv.Close(); d.Close() })

	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devnet: STUN listener: %w", err)
	}
	done := make(chan struct{})
	go serveSTUN(pc.(*net.UDPConn), done)
	n.closers = append(n.closers, func() { pc.Close(); <-done })

	return &tailcfg.DERPMap{Regions: map[int]*tailcfg.DERPRegion{1: {
		RegionID: 1, RegionCode: "dev", RegionName: "loopback",
		Nodes: []*tailcfg.DERPNode{{
			Name: "dev1", RegionID: 1, HostName: "127.0.0.1", IPv4: "127.0.0.1", IPv6: "none",
			DERPPort: ln.Addr().(*net.TCPAddr).Port, STUNPort: pc.LocalAddr().(*net.UDPAddr).Port,
			STUNTestIP: "127.0.0.1", InsecureForTests: true,
		}},
	}}}, nil
}

// serveSTUN answers STUN binding requests with the sender's address.
func serveSTUN(pc *net.UDPConn, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 64<<10)
	for {
		n, src, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		pkt := buf[:n]
		if !stun.Is(pkt) {
			continue
		}
		txid, err := stun.ParseBindingRequest(pkt)
		if err != nil {
			continue
		}
		_, _ = pc.WriteToUDPAddrPort(stun.Response(txid, src), src)
	}
}

// NodeOptions configure a node.
type NodeOptions struct {
	// Dir holds the node's state; required.
	Dir      string
	Hostname string
	Tags     []string
	// Ephemeral nodes are removed from the tailnet when they go away.
	Ephemeral bool
	Logf      logger.Logf
}

// Join starts a tsnet node on the net at controlURL and waits until it is
// up and connected to its home DERP.
func Join(ctx context.Context, controlURL string, o NodeOptions) (*tsnet.Server, error) {
	SetOfflineKnobs()
	s := &tsnet.Server{
		Dir: o.Dir, Hostname: o.Hostname, ControlURL: controlURL, Ephemeral: o.Ephemeral,
		AdvertiseTags: o.Tags, Logf: o.Logf, UserLogf: o.Logf,
	}
	if s.Logf == nil {
		s.Logf = logger.Discard
		s.UserLogf = logger.Discard
	}
	if _, err := s.Up(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("devnet: %s up: %w", o.Hostname, err)
	}
	return s, nil
}

// WaitReachable waits until a has a path to the peer named peerHost (its
// DERP relay is known): without it, the first packets may stall for 5 s
// while WireGuard retries.
func WaitReachable(ctx context.Context, a *tsnet.Server, peerHost string) error {
	lc, err := a.LocalClient()
	if err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := lc.Status(ctx)
		if err == nil {
			for _, p := range st.Peer {
				if p.HostName == peerHost && p.Relay != "" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devnet: %s not reachable: %w", peerHost, ctx.Err())
		case <-tick.C:
		}
	}
}

type logWriter struct{ logf logger.Logf }

func (w logWriter) Write(p []byte) (int, error) {
	w.logf("%s", p)
	return len(p), nil
}
