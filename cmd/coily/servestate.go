package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit"
	"coily.dev/coily/fleet"
	"coily.dev/coily/fleet/auditship"
	"coily.dev/coily/metrics"
	"coily.dev/coily/regularfile"
	"coily.dev/coily/store/etcdstore"
)

// etcdFlags say how to reach an etcd cluster several hosts share:
// --state etcd://… and the host's credentials (coily serve, and coily
// audit tail --fleet).
type etcdFlags struct {
	state, ca, cert, key, user, passwordFile *string
}

// registerEtcdFlags registers the flags that reach an etcd cluster (its
// CA, this host's credentials) beside url, the flag naming it: serve's
// --state, audit tail's --state, state migrate's --to.
func registerEtcdFlags(fs *pflag.FlagSet, url *string) *etcdFlags {
	return &etcdFlags{
		state: url,
		ca:    stringFlag(fs, "etcd-ca", "COILY_ETCD_CA", "", "with --state etcd://: the CA that signs the members' certificates (required)"),
		cert:  stringFlag(fs, "etcd-cert", "COILY_ETCD_CERT", "", "with --state etcd://: this host's client certificate (with --etcd-key)"),
		key:   stringFlag(fs, "etcd-key", "COILY_ETCD_KEY", "", "with --state etcd://: the client certificate's key"),
		user:  stringFlag(fs, "etcd-user", "COILY_ETCD_USER", "", "with --state etcd://: this host's etcd user, in place of a client certificate (with --etcd-password-file)"),
		passwordFile: stringFlag(fs, "etcd-password-file", "COILY_ETCD_PASSWORD_FILE", "",
			"with --state etcd://: the file holding the etcd user's password"),
	}
}

// set reports whether any flag is given.
func (f *etcdFlags) set() bool {
	return slices.ContainsFunc([]*string{f.state, f.ca, f.cert, f.key, f.user, f.passwordFile}, func(v *string) bool { return *v != "" })
}

// conn reads the flags: the cluster's members, prefix and this host's
// credentials (--state must be given).
func (f *etcdFlags) conn() (etcdstore.Config, error) {
	endpoints, prefix, err := parseStateURL(*f.state)
	if err != nil {
		return etcdstore.Config{}, err
	}
	cfg := etcdstore.Config{Endpoints: endpoints, Prefix: prefix}
	if cfg.TLS, err = f.tls(); err != nil {
		return etcdstore.Config{}, err
	}
	if *f.user != "" || *f.passwordFile != "" {
		if *f.user == "" || *f.passwordFile == "" {
			return etcdstore.Config{}, errors.New("--etcd-user and --etcd-password-file go together")
		}
		pw, err := regularfile.Read(*f.passwordFile, 4<<10)
		if err != nil {
			return etcdstore.Config{}, fmt.Errorf("etcd password: %w", err)
		}
		cfg.Username, cfg.Password = *f.user, strings.TrimSpace(string(pw))
	}
	if len(cfg.TLS.Certificates) == 0 && cfg.Username == "" {
		return etcdstore.Config{}, errors.New("--state etcd:// needs this host's credentials: --etcd-cert and --etcd-key, or --etcd-user and --etcd-password-file")
	}
	return cfg, nil
}

// stateFlags say where the state that decides what runs is kept: this
// host's state file (the default) or an etcd cluster several hosts share.
type stateFlags struct {
	*etcdFlags
	sealKey, hostName *string
	auditKeep         *time.Duration
}

func registerStateFlags(fs *pflag.FlagSet) *stateFlags {
	return &stateFlags{
		etcdFlags: registerEtcdFlags(fs, stringFlag(fs, "state", "COILY_STATE", "", "keep the state that decides what runs (stops, rates, keys, relay records, leases, concurrency slots, approvals) in etcd, shared by several hosts: etcd://HOST:PORT,HOST:PORT/CLUSTER (TLS required; default: this host's state file)")),
		sealKey:   sealKeyFlag(fs),
		hostName: stringFlag(fs, "host-name", "COILY_HOST_NAME", "",
			"with --state etcd://: this host's name in its audit records and the fleet's audit view, 1 to 64 letters, digits, '.', '_' or '-', one per host (default: the tailnet node's name with --tailnet, else the system's host name)"),
		auditKeep: durationFlag(fs, "audit-keep", "COILY_AUDIT_KEEP", etcdstore.DefaultAuditKeep,
			"with --state etcd://: how long the fleet's audit view in etcd keeps a record (1h to 90 days; each host's own log keeps every record)"),
	}
}

func sealKeyFlag(fs *pflag.FlagSet) *string {
	return stringFlag(fs, "state-seal-key", "COILY_STATE_SEAL_KEY", "", "with --state etcd://: the file of 32 bytes (mode 0600) every host holds that seals the sandboxes' secrets in etcd (required)")
}

// sharedState is the etcd cluster a host shares its state in.
type sharedState struct {
	cfg etcdstore.Config
	// host names this host in its audit records and the fleet's view.
	host string
	// secrets are the files holding this host's credentials to the
	// cluster and the seal key: hidden from sandboxes (ownFiles).
	secrets []string
}

// config reads the flags: nil when the state stays in this host's file.
// nodeName is the tailnet node's name ("" without --tailnet).
func (f *stateFlags) config(nodeName string) (*sharedState, error) {
	if *f.state == "" {
		if f.set() || *f.sealKey != "" || *f.hostName != "" {
			return nil, errors.New("--etcd-*, --state-seal-key and --host-name apply with --state etcd://")
		}
		return nil, nil
	}
	cfg, err := f.conn()
	if err != nil {
		return nil, err
	}
	if *f.sealKey == "" {
		return nil, errors.New("--state etcd:// needs --state-seal-key: a sandbox's secret is never stored in clear")
	}
	if cfg.SealKey, err = readSealKey(*f.sealKey); err != nil {
		return nil, err
	}
	if *f.auditKeep < time.Hour || *f.auditKeep > 90*24*time.Hour {
		return nil, fmt.Errorf("--audit-keep %v: must be between 1h and 90 days", *f.auditKeep)
	}
	cfg.AuditKeep = *f.auditKeep
	host := *f.hostName
	if host == "" {
		if host = nodeName; host == "" {
			if host, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("host name: %w (set --host-name)", err)
			}
		}
	}
	if err := etcdstore.CheckHostName(host); err != nil {
		return nil, fmt.Errorf("--host-name: %w", err)
	}
	return &sharedState{cfg: cfg, host: host, secrets: []string{*f.key, *f.passwordFile, *f.sealKey}}, nil
}

// tls is the client's TLS: the members verified by --etcd-ca, and this
// host's certificate when given.
func (f *etcdFlags) tls() (*tls.Config, error) {
	if *f.ca == "" {
		return nil, errors.New("--state etcd:// needs --etcd-ca: the members are reached over TLS only")
	}
	pem, err := regularfile.Read(*f.ca, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("etcd CA %s: no PEM certificate", *f.ca)
	}
	out := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if (*f.cert == "") != (*f.key == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	if *f.cert != "" {
		c, err := tls.LoadX509KeyPair(*f.cert, *f.key)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		out.Certificates = []tls.Certificate{c}
	}
	return out, nil
}

// readSealKey reads the seal key: a regular file of exactly 32 bytes,
// open to its owner only.
func readSealKey(path string) ([]byte, error) {
	f, fi, err := regularfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("state seal key: %w", err)
	}
	defer f.Close()
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("state seal key %s has mode %04o, open to group or others: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	key := make([]byte, 33)
	n, err := io.ReadFull(f, key)
	if n != 32 || !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("state seal key %s: not 32 bytes", path)
	}
	return key[:32], nil
}

// maxEndpoints bounds the members one --state names.
const maxEndpoints = 16

// parseStateURL reads etcd://HOST:PORT[,HOST:PORT…]/CLUSTER: the members'
// https endpoints and the prefix /coily/CLUSTER/ every key lives under.
// CLUSTER is letters, digits, '.', '_' and '-' (not "." or ".."), so
// that no name reaches another cluster's keys.
func parseStateURL(s string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("--state %q: want etcd://HOST:PORT,HOST:PORT/CLUSTER", s)
	}
	hosts, cluster, ok := strings.Cut(rest, "/")
	if !ok || !clusterName(cluster) {
		return nil, "", fmt.Errorf("--state %q: the cluster's name (after the hosts' /) is 1 to 64 letters, digits, '.', '_' or '-'", s)
	}
	list := strings.Split(hosts, ",")
	if len(list) > maxEndpoints {
		return nil, "", fmt.Errorf("--state: %d members, at most %d", len(list), maxEndpoints)
	}
	for _, h := range list {
		if err := checkHostPort(h); err != nil {
			return nil, "", fmt.Errorf("--state: member %q: %w", h, err)
		}
		endpoints = append(endpoints, "https://"+h)
	}
	return endpoints, "/coily/" + cluster + "/", nil
}

func checkHostPort(h string) error {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port != strconv.Itoa(p) {
		return fmt.Errorf("port %q is not 1 to 65535", port)
	}
	if host == "" || len(host) > 253 {
		return errors.New("no host")
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:", r)) {
			return fmt.Errorf("host holds %q", r)
		}
	}
	return nil
}

func clusterName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// open connects to the cluster and returns its store and the sync that
// keeps this host's stops in step with it, both reporting to reg's
// metrics (metrics.Etcd).
//
// The host then claims its name (etcdstore.ClaimHost) with the id kept in
// stateDir: a name another live host holds refuses the start.
func (s *sharedState) open(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir string) (*etcdstore.Store, *fleet.Sync, error) {
	var sync *fleet.Sync // set before the metrics are served
	m, err := metrics.NewEtcd(reg, func() bool { return sync.Available() })
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	cfg := s.cfg
	cfg.Observe = m.Call
	st, err := etcdstore.Open(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("shared state: %w", err)
	}
	id, err := hostID(stateDir)
	if err == nil {
		err = st.ClaimHost(ctx, s.host, id, log)
	}
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("shared state: %w", err)
	}
	sync = fleet.New(fleet.Config{Store: st, Logger: log, LockoutLearnt: m.LockoutLearnt})
	return st, sync, nil
}

// auditHost is the host's name in its audit records ("": one host).
func (s *sharedState) auditHost() string {
	if s == nil {
		return ""
	}
	return s.host
}

// ship starts shipping the host's audit log to the cluster (package
// fleet/auditship); stop stops it.
func (s *sharedState) ship(st *etcdstore.Store, al *audit.Log, log *slog.Logger) (stop func(), err error) {
	sh, err := auditship.Start(auditship.Config{Store: st, Log: al, Host: s.host, Logger: log})
	if err != nil {
		return nil, err
	}
	return sh.Stop, nil
}
