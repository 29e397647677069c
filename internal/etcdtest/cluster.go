// Package etcdtest starts a real etcd cluster inside a test process: n
// members of the embedded server (go.etcd.io/etcd/server/v3/embed) on
// 127.0.0.1, with TLS between clients and members and between members,
// client certificates required (a CA and certificates made in-process).
// It is imported only from tests: no binary links the etcd server.
//
// A test package starts one cluster (Start in a test, or New in TestMain)
// and runs its tests against it one at a time: several clusters at once
// on a busy machine flap their elections. Stop and Restart take a member
// down and up; Proxy puts a TCP proxy in front of a member so that one
// client can be cut off while the others go on.
package etcdtest

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"coily.dev/coily/internal/poll"
)

// Options tune a cluster. The zero value is what most tests want.
type Options struct {
	// Fsync makes the members fsync their logs and databases, as in
	// production (off by default: faster, and a test process that dies
	// takes its cluster with it).
	Fsync bool
	// Log sends the members' warnings and errors to stderr.
	Log bool
}

// StartTimeout bounds how long the cluster (or one restarted member) may
// take to be ready.
const StartTimeout = 60 * time.Second

// Cluster is a running n-member cluster.
type Cluster struct {
	dir     string
	opts    Options
	pki     *pki
	members []*member

	mu      sync.Mutex
	proxies []*Proxy
}

type member struct {
	name               string
	dir                string
	peerURL, clientURL url.URL
	etcd               *embed.Etcd // nil while stopped
}

// Start starts an n-member cluster with its data in t.TempDir(), stopped
// at the test's end.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	c, err := start(t.TempDir(), n, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// New starts an n-member cluster with its data in a new temporary
// directory, for TestMain (one cluster for a package's tests). Close stops
// it and removes the directory.
func New(n int, opts Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, err
	}
	c, err := start(dir, n, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// Close stops every member and proxy and removes the cluster's directory
// (made by New).
func (c *Cluster) Close() error {
	c.close()
	return os.RemoveAll(c.dir)
}

// start makes the certificates and starts the members, trying again with
// other ports when one was taken between reserving and listening.
func start(dir string, n int, opts Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdtest: %d members", n)
	}
	p, err := newPKI(dir)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: certificates: %w", err)
	}
	for attempt := 1; ; attempt++ {
		c := &Cluster{dir: dir, opts: opts, pki: p}
		err := c.startMembers(n, attempt)
		if err == nil {
			return c, nil
		}
		c.close()
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			return nil, err
		}
	}
}

func (c *Cluster) startMembers(n, attempt int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var initial []string
	for i := range n {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(c.dir, fmt.Sprintf("try%d-m%d", attempt, i)),
			peerURL:   url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			clientURL: url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	for _, m := range c.members {
		e, err := embed.StartEtcd(c.config(m, strings.Join(initial, ","), embed.ClusterStateFlagNew))
		if err != nil {
			return fmt.Errorf("etcdtest: start %s: %w", m.name, err)
		}
		m.etcd = e
	}
	for _, m := range c.members {
		if err := c.ready(m); err != nil {
			return err
		}
	}
	return nil
}

// config is member m's configuration: TLS everywhere with client
// certificates required, and election timing generous enough for the
// race detector on a busy machine.
func (c *Cluster) config(m *member, initial, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = state
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenMetricsUrls = nil
	tlsInfo := func() (ti transport.TLSInfo) {
		ti.CertFile, ti.KeyFile, ti.TrustedCAFile = c.pki.memberCert, c.pki.memberKey, c.pki.caFile
		ti.ClientCertAuth = true
		return ti
	}
	cfg.ClientTLSInfo = tlsInfo()
	cfg.PeerTLSInfo = tlsInfo()
	cfg.TickMs, cfg.ElectionMs = 100, 1500
	if raceEnabled {
		cfg.ElectionMs = 3000
	}
	cfg.UnsafeNoFsync = !c.opts.Fsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if c.opts.Log {
		cfg.ZapLoggerBuilder = nil
		cfg.LogLevel = "warn"
		cfg.LogOutputs = []string{"stderr"}
	}
	return cfg
}

// ready waits until m has joined the cluster and serves clients.
func (c *Cluster) ready(m *member) error {
	select {
	case <-m.etcd.Server.ReadyNotify():
		return nil
	case err := <-m.etcd.Err():
		return fmt.Errorf("etcdtest: %s: %w", m.name, err)
	case <-time.After(StartTimeout):
		return fmt.Errorf("etcdtest: %s not ready after %v", m.name, StartTimeout)
	}
}

// freePorts reserves n distinct ports on 127.0.0.1 by listening and
// closing; start retries when one is taken again before etcd listens.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: reserve a port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) close() {
	c.mu.Lock()
	proxies := c.proxies
	c.proxies = nil
	c.mu.Unlock()
	for _, p := range proxies {
		p.Close()
	}
	for _, m := range c.members {
		if m.etcd != nil {
			m.etcd.Close()
			m.etcd = nil
		}
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.clientURL.String())
	}
	return out
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL.String() }

// ClientTLS is a TLS configuration for a client of the cluster: it trusts
// the cluster's CA and presents a client certificate it signed.
func (c *Cluster) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.pki.pool, Certificates: []tls.Certificate{c.pki.client}, MinVersion: tls.VersionTLS12}
}

// CAFile is the cluster's CA certificate as a PEM file, for a client
// configured by files (coily's --etcd-ca).
func (c *Cluster) CAFile() string { return c.pki.caFile }

// ServerOnlyTLS trusts the cluster's CA but presents no client
// certificate: the members refuse it.
func (c *Cluster) ServerOnlyTLS() *tls.Config {
	return &tls.Config{RootCAs: c.pki.pool, MinVersion: tls.VersionTLS12}
}

// Stop stops member i (its data stays for Restart).
func (c *Cluster) Stop(i int) {
	m := c.members[i]
	if m.etcd != nil {
		m.etcd.Close()
		m.etcd = nil
	}
}

// Restart starts a stopped member i again on its data and URLs, and waits
// until it has rejoined.
func (c *Cluster) Restart(i int) error {
	m := c.members[i]
	if m.etcd != nil {
		return fmt.Errorf("etcdtest: %s is running", m.name)
	}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peerURL.String())
	}
	cfg := c.config(m, strings.Join(initial, ","), embed.ClusterStateFlagExisting)
	var err error
	// The port may be held a moment (by another process that took it
	// meanwhile): try again until StartTimeout.
	poll.Within(StartTimeout, func() bool {
		m.etcd, err = embed.StartEtcd(cfg)
		return err == nil || !errors.Is(err, syscall.EADDRINUSE)
	})
	if err != nil {
		m.etcd = nil
		return fmt.Errorf("etcdtest: restart %s: %w", m.name, err)
	}
	return c.ready(m)
}

// Leader is the index of the member that leads, or -1 when none of the
// running ones knows a leader.
func (c *Cluster) Leader() int {
	for _, m := range c.members {
		if m.etcd == nil {
			continue
		}
		lead := m.etcd.Server.Leader()
		for i, o := range c.members {
			if o.etcd != nil && o.etcd.Server.MemberID() == lead {
				return i
			}
		}
	}
	return -1
}

// Proxy starts a TCP proxy in front of member i's client URL, closed with
// the cluster (or by its own Close).
func (c *Cluster) Proxy(i int) (*Proxy, error) { return c.proxyOn(i, listenLoopback) }

// proxyOn is Proxy listening on what listen returns.
func (c *Cluster) proxyOn(i int, listen func() (net.Listener, error)) (*Proxy, error) {
	ln, err := listen()
	if err != nil {
		return nil, fmt.Errorf("etcdtest: proxy: %w", err)
	}
	p := newProxy(ln, c.members[i].clientURL.Host)
	c.mu.Lock()
	c.proxies = append(c.proxies, p)
	c.mu.Unlock()
	return p, nil
}

// Main runs a test package's tests (m) against one n-member cluster it
// starts first and hands to use, closes it, and fails the run if a
// goroutine outlives it (goleak, etcd's own left aside): a package's
// TestMain is os.Exit(etcdtest.Main(m, 3, func(c *Cluster) { cluster = c })).
// A fuzz worker process runs its target without a cluster.
func Main(m *testing.M, n int, use func(*Cluster)) int {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return m.Run()
	}
	start := time.Now()
	c, err := New(n, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "etcdtest: %d members ready in %v\n", n, time.Since(start).Round(time.Millisecond))
	use(c)
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(IgnoreLeaks()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Stopped reports whether member i is stopped.
func (c *Cluster) Stopped(i int) bool { return c.members[i].etcd == nil }
