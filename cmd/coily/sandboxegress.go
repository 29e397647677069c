package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"coily.dev/coily/attach/egressproxy"
	"coily.dev/coily/audit"
	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
	"coily.dev/coily/sandbox"
)

// egressFlags are `sandbox exec`'s --egress-* flags: an egress block typed
// by hand, to try an allowlist before it goes into a policy. They are read
// by policy.ParseEgress, as a rule's `egress:` block is.
type egressFlags struct {
	mode                                                        *string
	allow, presets, cidrs, hosts, inspect, inject, injectPreset *repeatedFlag
}

// egressFlagNames maps an egress block's keys to the flags that set them.
var egressFlagNames = map[string]string{
	"mode": "--egress-mode", "allow": "--egress-allow", "presets": "--egress-preset", "allow_cidrs": "--egress-allow-cidr",
	"hosts": "--egress-host", "inspect": "--egress-inspect", "inject": "--egress-inject", "inject_preset": "--egress-inject-preset",
}

func addEgressFlags(fs *pflag.FlagSet) *egressFlags {
	return &egressFlags{
		mode:         stringFlag(fs, "egress-mode", "COILY_EGRESS_MODE", "", "with --network proxied: enforce (the default) or observe"),
		allow:        listFlag(fs, "egress-allow", "COILY_EGRESS_ALLOW", "with --network proxied: HOST[:PORT] or *.DOMAIN[:PORT] the command may reach; repeatable"),
		presets:      listFlag(fs, "egress-preset", "COILY_EGRESS_PRESET", "with --network proxied: a preset's hosts (npm, pip, github, aws, ...); repeatable"),
		cidrs:        listFlag(fs, "egress-allow-cidr", "COILY_EGRESS_ALLOW_CIDR", "with --network proxied: a CIDR the command may reach by address (private, loopback, ...); repeatable"),
		hosts:        listFlag(fs, "egress-host", "COILY_EGRESS_HOST", "with --network proxied: NAME=IP: the proxy connects to NAME at IP instead of asking DNS (a guarded address still needs --egress-allow-cidr); repeatable"),
		inspect:      listFlag(fs, "egress-inspect", "COILY_EGRESS_INSPECT", "with --network proxied: a host of the allowlist whose TLS the proxy terminates with a CA of this run; repeatable"),
		inject:       listFlag(fs, "egress-inject", "COILY_EGRESS_INJECT", "with --network proxied: VAR@HOST[:PORT][/PATH]:FORM (bearer, token, basic, sigv4, header=NAME): the proxy sends $VAR's value to an inspected HOST (port 443 unless given), the command gets a placeholder; repeatable"),
		injectPreset: listFlag(fs, "egress-inject-preset", "COILY_EGRESS_INJECT_PRESET", "with --network proxied: [VAR=]NAME[@HOST[:PORT][/PATH]]: the entries of inject preset NAME (gh, git-https, npm, pip) for $VAR's value (the preset's variable unless given), its hosts inspected; repeatable"),
	}
}

// givenOn names the first --egress-* flag the command line set, "" for
// none (values from the environment apply only where the flags do).
func givenOn(fs *pflag.FlagSet) string {
	name := ""
	fs.Visit(func(f *pflag.Flag) {
		if name == "" && strings.HasPrefix(f.Name, "egress-") {
			name = "--" + f.Name
		}
	})
	return name
}

// parse reads the flags as an egress block; an error names the flag.
func (f *egressFlags) parse() (*policy.Egress, error) {
	eg, err := policy.ParseEgress(policy.EgressSpec{Mode: *f.mode, Allow: f.allow.specs, Presets: f.presets.specs, CIDRs: f.cidrs.specs, Hosts: f.hosts.specs,
		Inspect: f.inspect.specs, Inject: f.inject.specs, InjectPresets: f.injectPreset.specs})
	var se *policy.EgressSpecError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("%s: %w", egressFlagNames[se.Field], se.Err)
	}
	return eg, err
}

// ownProxy is the egress proxy `sandbox exec` starts for --network proxied
// without --proxy-socket: the proxy the server starts for each exec, on a
// unix socket in a fresh 0700 directory.
type ownProxy struct {
	proxy  *egress.Proxy
	dir    string
	socket string
	served chan struct{}
	// With --egress-inspect: the CA bundle to bind at sandbox.CAPath and
	// the variables the command gets (placeholders, CA variables).
	bundle *os.File
	env    map[string]string
}

// For a root process the sandbox runs as runAs (zero: the default user):
// the directory lets it through (0711) and the socket is its, as the
// server does.
func startOwnProxy(eg *policy.Egress, runAs sandbox.User) (*ownProxy, error) {
	allow, mode, err := eg.ProxyAllowlist()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "coily-egress-") // 0700
	if err != nil {
		return nil, fmt.Errorf("egress proxy directory: %w", err)
	}
	o := &ownProxy{dir: dir, socket: filepath.Join(dir, "egress.sock"), served: make(chan struct{})}
	var insp *egress.Inspection
	if len(eg.Inspect) > 0 {
		if insp, err = o.inspect(eg); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	var resolver egress.Resolver = net.DefaultResolver
	if len(eg.Hosts) > 0 {
		resolver = egress.Pinned{Hosts: eg.Hosts, Next: net.DefaultResolver}
	}
	p, err := egress.New(egress.Config{Rule: "sandbox exec", Allowlist: allow, Mode: mode, Resolver: resolver, Inspect: insp})
	if err != nil {
		o.closeBundle()
		os.RemoveAll(dir)
		return nil, err
	}
	o.proxy = p
	l, err := net.Listen("unix", o.socket)
	if err == nil {
		if err = giveToSandbox(dir, o.socket, runAs); err != nil {
			l.Close()
		}
	}
	if err != nil {
		o.closeBundle()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress proxy socket: %w", err)
	}
	go func() {
		defer close(o.served)
		_ = p.Serve(l) // until stop closes the proxy
	}()
	return o, nil
}

// stop ends the proxy and every tunnel, removes its socket, and returns
// what it saw.
func (o *ownProxy) stop() ([]audit.EgressRow, []audit.EgressRequest) {
	_ = o.proxy.Close()
	<-o.served
	o.closeBundle()
	os.RemoveAll(o.dir)
	reqs, _ := o.proxy.Requests()
	return audit.EgressRows(o.proxy.Rows()), audit.EgressRequests(reqs)
}

// inspect readies --egress-inspect and --egress-inject(-preset): each injected
// variable's value is taken from coily's own environment, and the
// command gets a placeholder in its place.
func (o *ownProxy) inspect(eg *policy.Egress) (*egress.Inspection, error) {
	secrets := map[string]string{}
	for _, in := range eg.Inject {
		v := os.Getenv(in.Env)
		if v == "" {
			return nil, fmt.Errorf("egress inject: $%s is not set in coily's environment", in.Env)
		}
		secrets[in.Env] = v
	}
	insp, env, f, err := egressproxy.Inspect(eg, secrets, "", time.Hour, time.Now(), o.dir, "ca-")
	if err != nil {
		return nil, fmt.Errorf("egress inspection: %w", err)
	}
	o.bundle, o.env = f, env
	return insp, nil
}

func (o *ownProxy) closeBundle() {
	if o.bundle != nil {
		o.bundle.Close()
		os.Remove(o.bundle.Name())
	}
}

// giveToSandbox lets a root process's sandbox user through dir and gives
// it the socket (connecting takes write access); nothing to do for a
// process not running as root, whose sandboxes run as itself.
func giveToSandbox(dir, socket string, runAs sandbox.User) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if runAs.IsZero() {
		runAs = sandbox.DefaultUser()
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	return os.Lchown(socket, runAs.UID, runAs.GID)
}

// childEnv is what the command's environment gets from the proxy; nil
// without one.
func (o *ownProxy) childEnv() map[string]string {
	if o == nil {
		return nil
	}
	return o.env
}
