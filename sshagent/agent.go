package sshagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"

	"golang.org/x/crypto/ssh"

	"coily.dev/coily/cmdtext"
	"coily.dev/coily/scrub"
)

// Bounds of one agent.
const (
	// MaxRefusals bounds the refusal sentences a Report carries.
	MaxRefusals = 16
	// maxConns bounds the connections served at once.
	maxConns = 32
	// maxBinds bounds the sessions bound on one connection (OpenSSH's
	// agent keeps 16).
	maxBinds = 16
	// DefaultMaxSignatures bounds the signatures one agent makes when
	// Config.MaxSignatures is 0: an ssh login asks for one or two, a
	// command that logs in a thousand times in one exec is looping.
	DefaultMaxSignatures = 1000
)

// Key is one private key the agent holds and where it may be used.
type Key struct {
	// Name labels the key: its credential reference. ssh sees it as the
	// key's comment.
	Name string
	// Signer holds the private key.
	Signer ssh.Signer
	// HostKeys are the host keys of the sessions the key may sign for:
	// those the rule pins for the key's hosts.
	HostKeys []ssh.PublicKey
	// Hosts names those hosts, for messages ("[git.example.com]:2222").
	Hosts string
}

// Config configures an Agent.
type Config struct {
	// Rule names the rule, for messages.
	Rule string
	Keys []Key
	// PinnedFor names, by fingerprint (SHA256:…), the hosts each of the
	// rule's pinned host keys is pinned for, for messages.
	PinnedFor map[string]string
	// MaxSignatures bounds the signatures the agent makes; past it, it
	// refuses to sign. 0 means DefaultMaxSignatures.
	MaxSignatures int
	// Logger gets a line for the first signature with each key for each
	// host key, one per distinct refusal, and a summary when the agent
	// closes: a command that asks for signatures in a loop fills no log.
	Logger *slog.Logger
	// Secrets are the exec's credentials: a refusal quotes what the
	// command sent (an extension or algorithm name) only with their
	// forms redacted (cmdtext).
	Secrets *scrub.Set
}

// Report is what an agent did: how many signatures it made, and why it
// refused what it refused (each sentence once, the first MaxRefusals;
// More counts the refusals after those).
type Report struct {
	Signed int
	// SignedBy counts the signatures of each key, by its index in
	// Config.Keys.
	SignedBy []int
	Refused  []cmdtext.Text
	More     int
}

// signPair is a key (by index) and the host key of the session it signed
// for: the agent logs the first signature of each pair only.
type signPair struct {
	key     int
	hostKey string
}

// Agent serves a fixed set of keys over a listener until Close.
type Agent struct {
	cfg        Config
	blobs      [][]byte // each key's public key blob, in order
	identities []byte   // the IDENTITIES_ANSWER message
	hostKeys   map[string]bool

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	closed  bool
	report  Report
	wg      sync.WaitGroup
	refused map[string]bool
	// signing counts the signatures under way or made, against the cap.
	signing int
	// logged holds the pairs whose first signature was logged.
	logged map[signPair]bool
}

// New checks cfg: at least one key, each with a signer and at least one
// host key; no key twice.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("ssh agent: no key")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxSignatures <= 0 {
		cfg.MaxSignatures = DefaultMaxSignatures
	}
	a := &Agent{cfg: cfg, hostKeys: map[string]bool{}, conns: map[net.Conn]struct{}{}, refused: map[string]bool{},
		logged: map[signPair]bool{}, report: Report{SignedBy: make([]int, len(cfg.Keys))}}
	answer := binary.BigEndian.AppendUint32([]byte{msgIdentitiesAnswer}, uint32(len(cfg.Keys)))
	for _, k := range cfg.Keys {
		if k.Signer == nil || len(k.HostKeys) == 0 {
			return nil, fmt.Errorf("ssh agent: key %s has no signer or no host key", k.Name)
		}
		blob := k.Signer.PublicKey().Marshal()
		if slices.ContainsFunc(a.blobs, func(b []byte) bool { return string(b) == string(blob) }) {
			return nil, fmt.Errorf("ssh agent: key %s is given twice", k.Name)
		}
		a.blobs = append(a.blobs, blob)
		answer = appendString(appendString(answer, blob), []byte(k.Name))
		for _, h := range k.HostKeys {
			a.hostKeys[string(h.Marshal())] = true
		}
	}
	a.identities = answer
	return a, nil
}

// Start serves l in the background until Close.
func (a *Agent) Start(l net.Listener) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		l.Close()
		return
	}
	a.ln = l
	a.wg.Add(1)
	go a.accept(l)
}

// accept serves each connection, at most maxConns at once.
func (a *Agent) accept(l net.Listener) {
	defer a.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			a.mu.Lock()
			if !a.closed {
				// Broken: the exec's ssh finds no agent from now on.
				a.cfg.Logger.Error("ssh agent stopped accepting", "rule", a.cfg.Rule, "err", err)
			}
			a.mu.Unlock()
			return
		}
		a.mu.Lock()
		switch {
		case a.closed:
			c.Close()
		case len(a.conns) >= maxConns:
			c.Close()
			a.refuseLocked(fmt.Sprintf("refused a connection: %d are open already", maxConns))
		default:
			a.conns[c] = struct{}{}
			a.wg.Add(1)
			go a.serve(c)
		}
		a.mu.Unlock()
	}
}

// serve answers one connection's requests in order.
func (a *Agent) serve(c net.Conn) {
	defer a.wg.Done()
	defer func() {
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}()
	s := &session{a: a}
	for {
		msg, err := readMessage(c)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				a.refuse(fmt.Sprintf("closed a connection that sent a message of more than %d bytes", maxMessage))
			}
			return
		}
		if _, err := c.Write(frame(s.handle(msg))); err != nil {
			return
		}
	}
}

// Close stops the agent: the listener and every connection are closed,
// and Close returns once nothing of the agent runs. The first Close logs
// how many signatures the agent made, when it made any.
func (a *Agent) Close() {
	a.mu.Lock()
	first := !a.closed
	a.closed = true
	if a.ln != nil {
		a.ln.Close()
	}
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	if !first {
		return
	}
	a.mu.Lock()
	signed, pairs := a.report.Signed, len(a.logged)
	a.mu.Unlock()
	if signed > 0 {
		a.cfg.Logger.Info("ssh agent closed", "rule", a.cfg.Rule, "signed", signed,
			"signed_unlogged", signed-pairs, "max_signatures", a.cfg.MaxSignatures)
	}
}

// Report returns what the agent did so far.
func (a *Agent) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.report
	r.Refused = slices.Clone(r.Refused)
	r.SignedBy = slices.Clone(r.SignedBy)
	return r
}

// refuse records a refusal sentence (each once) and logs it.
func (a *Agent) refuse(sentence string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refuseLocked(sentence)
}

func (a *Agent) refuseLocked(sentence string) {
	switch {
	case a.refused[sentence]:
	case len(a.report.Refused) < MaxRefusals:
		a.refused[sentence] = true
		text := cmdtext.New(a.cfg.Secrets, sentence)
		a.report.Refused = append(a.report.Refused, text)
		a.cfg.Logger.Warn("ssh agent refused", "rule", a.cfg.Rule, "reason", text)
	default:
		// A command that asks for many different refusals fills no log:
		// the rest are counted.
		if a.report.More == 0 {
			a.cfg.Logger.Warn("ssh agent refused more; the rest are counted, not logged", "rule", a.cfg.Rule)
		}
		a.report.More++
	}
}

// reserve takes one of the agent's MaxSignatures before a signature is
// made; false when they are all taken. A reservation is given back by
// unreserve (the signature failed) or kept by signed.
func (a *Agent) reserve() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.signing >= a.cfg.MaxSignatures {
		return false
	}
	a.signing++
	return true
}

func (a *Agent) unreserve() {
	a.mu.Lock()
	a.signing--
	a.mu.Unlock()
}

// signed counts a signature made with key i and logs it when it is the
// first with that key for that host key; the rest are counted, in the
// report and the line Close logs.
func (a *Agent) signed(i int, hostKey ssh.PublicKey) {
	p := signPair{key: i, hostKey: string(hostKey.Marshal())}
	a.mu.Lock()
	a.report.Signed++
	a.report.SignedBy[i]++
	first := !a.logged[p]
	a.logged[p] = true
	a.mu.Unlock()
	if first {
		a.cfg.Logger.Info("ssh agent signed", "rule", a.cfg.Rule, "key", a.cfg.Keys[i].Name, "host_key", ssh.FingerprintSHA256(hostKey),
			"note", "further signatures with this key for this host key are counted, not logged")
	}
}

// pinned names the hosts a host key is pinned for: " (pinned for …)", or
// " (not pinned by the rule)".
func (a *Agent) pinned(key ssh.PublicKey) string {
	if hosts, ok := a.cfg.PinnedFor[ssh.FingerprintSHA256(key)]; ok {
		return " (pinned for " + hosts + ")"
	}
	return " (not pinned by the rule)"
}
