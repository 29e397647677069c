package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"coily.dev/coily/egress"
	"coily.dev/coily/keystore/credref"
)

// Inject is one `egress.inject` entry: the credential Ref, which never
// enters the sandbox, is sent by the egress proxy to Host (requests whose
// path starts with Path), in Form, in place of the placeholder the child
// finds in its variable Env.
type Inject struct {
	Env    string
	Ref    credref.Ref
	Host   string
	Port   int    // the CONNECT port of Host (0: 443)
	Path   string // "" or starting with "/"
	Form   egress.Form
	Header string // FormHeader's header
}

// injectFile is an `egress.inject` entry as written.
type injectFile struct {
	Preset     string `yaml:"preset"`
	Env        string `yaml:"env"`
	Credential string `yaml:"credential"`
	Host       string `yaml:"host"`
	Path       string `yaml:"path"`
	Form       string `yaml:"form"`
	Header     string `yaml:"header"`
}

// MaxInspectHosts bounds a rule's `egress.inspect`.
const MaxInspectHosts = 32

// maxHTTPRules bounds the method and path rules of one inspected host.
const maxHTTPRules = 256

// checkInspect reads `inspect` (exact host names the effective
// allowlist lets through) into e.Inspect.
func checkInspect(e *Egress, hosts []string) error {
	if len(hosts) > MaxInspectHosts {
		return fmt.Errorf("egress inspect: at most %d hosts", MaxInspectHosts)
	}
	for _, h := range hosts {
		if err := inspectHost(e, h); err != nil {
			return err
		}
	}
	return nil
}

// inspectHost adds h (one host name the effective allowlist lets
// through) to e.Inspect.
func inspectHost(e *Egress, h string) error {
	hp, err := ParseHostPort(h)
	switch {
	case err != nil:
		return fmt.Errorf("egress inspect: %w", err)
	case hp.Suffix || hp.Port != 0:
		return fmt.Errorf("egress inspect: %q must be one host name, without wildcard or port", h)
	case slices.Contains(e.Inspect, hp.Host):
		return fmt.Errorf("egress inspect: %q is listed twice", h)
	case len(e.Inspect) >= MaxInspectHosts:
		return fmt.Errorf("egress inspect: at most %d hosts", MaxInspectHosts)
	case !slices.ContainsFunc(e.Effective(), func(a HostPort) bool { return a.Match(hp.Host, cmpPort(a.Port)) }):
		return fmt.Errorf("egress inspect: %q is not in the rule's egress allowlist", h)
	}
	e.Inspect = append(e.Inspect, hp.Host)
	return nil
}

func cmpPort(p int) int {
	if p == 0 {
		return 443
	}
	return p
}

// checkHTTPRules reads `http`: for each inspected host, rules such as
// "GET /repos/alice/app/**" (egress.ParseHTTPRule).
func checkHTTPRules(e *Egress, rules map[string][]string) error {
	for _, host := range slices.Sorted(maps.Keys(rules)) {
		if !slices.Contains(e.Inspect, host) {
			return fmt.Errorf("egress http: %q is not an inspected host (egress inspect)", host)
		}
		if len(rules[host]) == 0 || len(rules[host]) > maxHTTPRules {
			return fmt.Errorf("egress http: %s needs 1 to %d rules", host, maxHTTPRules)
		}
		for _, s := range rules[host] {
			if _, err := egress.ParseHTTPRule(s); err != nil {
				return err
			}
		}
	}
	e.HTTP = rules
	return nil
}

// checkInject reads one `inject` entry of rule r.
func checkInject(r *Rule, e *Egress, f injectFile) (Inject, error) {
	in := Inject{Env: f.Env, Path: f.Path, Header: f.Header}
	host, port, err := injectHost(f.Host)
	if err != nil {
		return in, err
	}
	in.Host, in.Port = host, port
	switch {
	case !ValidEnvName(f.Env):
		return in, fmt.Errorf("egress inject: bad variable name %q", f.Env)
	case ReservedEnv(f.Env):
		return in, fmt.Errorf("egress inject: %s is set by the server", f.Env)
	case slices.Contains(r.Env, f.Env):
		return in, fmt.Errorf("egress inject: %s is also a variable callers may pass", f.Env)
	case r.Credentials[f.Env] != (credref.Ref{}):
		return in, fmt.Errorf("egress inject: %s is also in credentials: the child would hold the secret itself", f.Env)
	case !slices.Contains(e.Inspect, in.Host):
		return in, fmt.Errorf("egress inject: host %q is not an inspected host (egress inspect)", f.Host)
	case !e.Allows(in.Host, cmpPort(in.Port)):
		return in, fmt.Errorf("egress inject: %s is not in the rule's egress allowlist (the credential would go nowhere)", in.HostPort())
	}
	if err := checkInjectPath(f.Path); err != nil {
		return in, err
	}
	form, err := injectForm(f.Form, f.Header)
	if err != nil {
		return in, err
	}
	in.Form = form
	ref, err := credref.Parse(f.Credential)
	if err != nil {
		return in, fmt.Errorf("egress inject: %s: %w", f.Env, err)
	}
	in.Ref = ref
	for _, o := range e.Inject {
		if o.Env == in.Env && o.Ref != in.Ref {
			return in, fmt.Errorf("egress inject: %s names two credentials", f.Env)
		}
	}
	return in, nil
}

// HostPort is the host and, when not 443, its port.
func (in Inject) HostPort() string {
	if in.Port == 0 || in.Port == 443 {
		return in.Host
	}
	return in.Host + ":" + strconv.Itoa(in.Port)
}

// injectHost reads an inject entry's host: one name, with the port the
// CONNECT names (none: 443; the credential goes to that port only).
func injectHost(s string) (string, int, error) {
	hp, err := ParseHostPort(s)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("egress inject: %w", err)
	case hp.Suffix:
		return "", 0, fmt.Errorf("egress inject: host %q must be one host name, without wildcard", s)
	}
	return hp.Host, hp.Port, nil
}

// checkInjectPath accepts "" or an absolute path without dot segments,
// query, fragment, percent signs or control bytes.
func checkInjectPath(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 1024 || !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#%*") || strings.Contains(p, "//") {
		return fmt.Errorf("egress inject: path %q must be a plain absolute path prefix", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("egress inject: path %q has a dot segment", p)
		}
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f {
			return fmt.Errorf("egress inject: path %q has a control byte, space or non-ASCII", p)
		}
	}
	return nil
}

// injectForm reads `form` (bearer, token, basic, sigv4) or `header: NAME`, one
// of them.
func injectForm(form, header string) (egress.Form, error) {
	switch {
	case form != "" && header != "":
		return 0, errors.New("egress inject: form and header are exclusive (header: NAME is the form)")
	case header != "":
		if !httpTokenName(header) || strings.EqualFold(header, "Host") || strings.EqualFold(header, "Content-Length") ||
			strings.EqualFold(header, "Transfer-Encoding") || strings.EqualFold(header, "Connection") || strings.HasPrefix(strings.ToLower(header), "proxy-") {
			return 0, fmt.Errorf("egress inject: header %q cannot carry a credential", header)
		}
		return egress.FormHeader, nil
	case form == "header":
		return 0, errors.New("egress inject: name the header with header: NAME")
	}
	f, err := egress.ParseForm(form)
	if err != nil {
		return 0, fmt.Errorf("egress inject: form %q: bearer, token, basic, sigv4 or header: NAME", form)
	}
	return f, nil
}

// httpTokenName reports a header name of letters, digits and hyphens.
func httpTokenName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// HTTPRules are the rules of the inspected hosts, parsed.
func (e *Egress) HTTPRules() map[string][]egress.HTTPRule {
	if e == nil || len(e.HTTP) == 0 {
		return nil
	}
	out := map[string][]egress.HTTPRule{}
	for host, rules := range e.HTTP {
		for _, s := range rules {
			r, _ := egress.ParseHTTPRule(s) // checked when parsed
			out[host] = append(out[host], r)
		}
	}
	return out
}
