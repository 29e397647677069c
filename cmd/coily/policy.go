package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/cli"
	"coily.dev/coily/policy"
	"coily.dev/coily/policycase"
)

func policyCmd(a *cli.App) *cobra.Command {
	return group("policy", "check a policy file, run its tests, or explain a decision",
		`Check a policy file (errors name file:line:column; warnings name rules that can never match, binaries
missing here, network and egress mismatches), run its tests (a table of requests and the decision each
must get), or explain how it decides one request.`,
		command(a, spec{use: "check FILE", short: "validate a policy file and explain each rule's settings", args: cobra.ExactArgs(1),
			flags: func(fs *pflag.FlagSet) runFunc {
				asJSON := boolFlag(fs, "json", "COILY_JSON", "print the result (rules, warnings, errors) as JSON")
				tests := boolFlag(fs, "tests", "COILY_POLICY_TESTS", "run the policy's tests too (POLICY.tests.yaml beside it, or --tests-file)")
				testsFile := stringFlag(fs, "tests-file", "COILY_POLICY_TESTS_FILE", "", "run the tests in this file (implies --tests)")
				return func(_ context.Context, e *env) int {
					if *tests && *testsFile == "" {
						*testsFile = policycase.BesidePath(e.args[0])
					}
					return checkPolicy(e, e.args[0], *asJSON, *testsFile)
				}
			}}),
		policyTestCmd(a),
		command(a, spec{use: "explain --policy FILE [--as PRINCIPAL] -- ARGV...", short: "show the decision, the rule and the reason for one request",
			args: cli.ArgsAfterDash("request"), example: "  coily policy explain --policy /etc/coily/policy.yaml --as tag:agent -- gh issue create --repo alice/x --title t",
			flags: func(fs *pflag.FlagSet) runFunc {
				path := stringFlag(fs, "policy", "COILY_POLICY", "", "policy file (required)")
				as := stringFlag(fs, "as", "COILY_AS", "", "principal to decide for (default: you, as the local operator)")
				envs := stringFlag(fs, "env", "COILY_EXEC_ENV", "", "comma-separated environment variable names the request passes")
				asJSON := boolFlag(fs, "json", "COILY_JSON", "print the decision as JSON")
				return func(_ context.Context, e *env) int { return policyExplain(e, *path, *as, *envs, *asJSON) }
			}}),
	)
}

// policyCheck validates a policy file: errors (with file, line and column)
// exit 1; rules whose binary is absent here are reported, not fatal.
func policyCheck(e *env, file string, asJSON bool) int { return checkPolicy(e, file, asJSON, "") }

// checkPolicy is policyCheck, running the tests in the file tests too
// (none when ""): a failing case, or a tests file that cannot be read,
// exits 1.
func checkPolicy(e *env, file string, asJSON bool, tests string) int {
	p, err := policy.Load(file)
	if err != nil {
		if asJSON {
			printJSON(e.stdout, map[string]any{"ok": false, "error": err.Error()})
		} else {
			printLine(e.stderr, "%v", err)
		}
		return 1
	}
	rules := p.Rules()
	absent := 0
	warnings := p.Warnings()
	type ruleOut struct {
		Name     string   `json:"name"`
		Line     int      `json:"line"`
		Binary   string   `json:"binary"`
		Present  bool     `json:"present"`
		Warnings []string `json:"warnings,omitempty"`
		Notes    []string `json:"notes,omitempty"`
	}
	var out []ruleOut
	for _, r := range rules {
		if r.Absent != nil {
			absent++
		}
		ro := ruleOut{Name: r.Name, Line: r.Line, Binary: r.Binary, Present: r.Resolved != ""}
		for _, w := range warnings {
			if w.Rule == r.Name {
				ro.Warnings = append(ro.Warnings, w.Msg)
			}
		}
		ro.Notes = slices.Concat(binaryLines(r), egressLines(r), gitcredentials.Notes(r), sshkeys.Notes(r), githubapp.Notes(r))
		out = append(out, ro)
		if asJSON {
			continue
		}
		for _, w := range ro.Warnings {
			printLine(e.stdout, "%s:%d: warning: %s", p.Path, r.Line, w)
		}
		for _, l := range ro.Notes {
			printLine(e.stdout, "%s:%d: %s", p.Path, r.Line, l)
		}
	}
	if asJSON {
		res := map[string]any{"ok": true, "path": p.Path, "sha256": p.SHA256, "rules": out, "absent": absent}
		code := 0
		if tests != "" {
			res["tests"], code = checkTestsJSON(p, tests)
			res["ok"] = code == 0
		}
		printJSON(e.stdout, res)
		return code
	}
	printLine(e.stdout, "%s: OK: %d rules (%d cannot match on this host), sha256 %s", p.Path, len(rules), absent, p.SHA256)
	if tests != "" {
		return runPolicyTests(e, p, tests, false)
	}
	return 0
}

// binaryLines says, for a rule listing candidate binaries, which one is
// present on this host, and the command name callers may use bare.
func binaryLines(r *policy.Rule) []string {
	if len(r.Candidates) < 2 {
		return nil
	}
	var present []string
	for _, c := range r.Candidates {
		if _, err := os.Lstat(c); err == nil {
			present = append(present, c)
		}
	}
	if r.Resolved == "" {
		return []string{fmt.Sprintf("rule %q command %s: none of %s is on this host", r.Name, r.Command(), strings.Join(r.Candidates, ", "))}
	}
	return []string{fmt.Sprintf("rule %q command %s: runs %s (present here: %s; candidates: %s)", r.Name, r.Command(), r.Binary,
		strings.Join(present, ", "), strings.Join(r.Candidates, ", "))}
}

// egressLines explains a proxied rule's egress: one line per entry of its
// effective allowlist and allowed CIDR, or a warning when an enforced
// proxy would have nothing to allow.
func egressLines(r *policy.Rule) []string {
	if r.Network != policy.NetworkProxied {
		return nil
	}
	mode := policy.EgressEnforce
	if r.Egress != nil {
		mode = r.Egress.Mode
	}
	var lines []string
	for _, hp := range r.Egress.Effective() {
		ports := ""
		if hp.Port == 0 {
			ports = " (443 by CONNECT, 80 by plain HTTP)"
		}
		lines = append(lines, fmt.Sprintf("rule %q egress %s: allow %s%s", r.Name, mode, hp, ports))
	}
	if r.Egress != nil {
		for _, c := range r.Egress.CIDRs {
			lines = append(lines, fmt.Sprintf("rule %q egress %s: allow_cidr %s", r.Name, mode, c))
		}
		for _, name := range slices.Sorted(maps.Keys(r.Egress.Hosts)) {
			lines = append(lines, fmt.Sprintf("rule %q egress %s: host %s resolves to %v, not through DNS", r.Name, mode, name, r.Egress.Hosts[name]))
		}
	}
	switch {
	case mode == policy.EgressObserve:
		lines = append(lines, fmt.Sprintf("rule %q egress observe: any host is allowed and recorded", r.Name))
	case len(lines) == 0:
		lines = append(lines, fmt.Sprintf("warning: rule %q needs the network but has no allowlist: every connection will be refused (add egress.allow or egress.presets)", r.Name))
	}
	return append(lines, knownHostLines(r, mode)...)
}

// knownHostLines lists a rule's pinned ssh host keys, and warns about a
// pinned host an enforced allowlist does not reach.
func knownHostLines(r *policy.Rule, mode string) []string {
	if r.Egress == nil {
		return nil
	}
	var lines []string
	for _, k := range r.Egress.SSHKnownHosts {
		hosts := strings.SplitN(k.String(), " ", 2)[0]
		lines = append(lines, fmt.Sprintf("rule %q egress %s: ssh_known_hosts %s %s %s", r.Name, mode, hosts, k.KeyType, k.Fingerprint))
		for _, h := range k.Hosts {
			if !r.Egress.ReachesSSH(h) {
				lines = append(lines, fmt.Sprintf("warning: rule %q pins an ssh host key for %s, which its egress allowlist does not reach (%s)",
					r.Name, h, policy.ReachHint(h)))
			}
		}
	}
	return lines
}

// policyExplain evaluates a request against a policy file locally and
// prints the decision, the rule and the reason.
func policyExplain(e *env, path, as, envs string, asJSON bool) int {
	if path == "" {
		return usage(e, "policy explain needs --policy FILE")
	}
	p, err := policy.Load(path)
	if err != nil {
		printLine(e.stderr, "%v", err)
		return 1
	}
	subject, err := explainSubject(as)
	if err != nil {
		printLine(e.stderr, "coily policy explain: %v", err)
		return 2
	}
	var names []string
	for _, n := range strings.Split(envs, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, strings.SplitN(n, "=", 2)[0])
		}
	}
	d := p.DecideExec(subject, policy.Request{Argv: e.args, Env: names})
	if asJSON {
		out := map[string]any{"decision": d.Result.String(), "principal": subject.Principal, "roles": p.Roles(subject),
			"reason": d.Reason, "would_deny": d.WouldDeny}
		if d.Rule != nil {
			out["rule"], out["line"] = d.Rule.Name, d.Rule.Line
			if d.Result == policy.Allow {
				out["runs"], out["sandbox"], out["workspace"], out["timeout"] = d.Rule.Resolved, d.Rule.Sandbox, d.Rule.Workspace, d.Rule.Timeout.String()
			}
			if d.Confirm != nil {
				out["confirm"], out["confirm_timeout"] = d.Confirm.Name, d.ConfirmTimeout.String()
			}
		}
		printJSON(e.stdout, out)
	} else {
		printDecision(e, p, subject, d)
	}
	if d.Result != policy.Allow {
		return 1
	}
	return 0
}

// explainSubject is the principal to explain for: "local:<user>" holds the
// operator role, as it would on the local socket.
func explainSubject(as string) (policy.Subject, error) {
	if as == "" {
		u, err := user.Current()
		if err != nil {
			return policy.Subject{}, errors.New("cannot tell who you are; use --as")
		}
		as = "local:" + u.Username
	}
	s := policy.Subject{Principal: as}
	if strings.HasPrefix(as, "local:") {
		s.Roles = []string{policy.OperatorRole}
	}
	return s, nil
}

func printDecision(e *env, p *policy.Policy, s policy.Subject, d policy.Decision) {
	printLine(e.stdout, "decision:  %s", strings.ToUpper(d.Result.String()))
	printLine(e.stdout, "principal: %s (roles: %s)", s.Principal, orNone(p.Roles(s)))
	if r := d.Rule; r != nil {
		printLine(e.stdout, "rule:      %s (%s:%d, %s)", r.Name, p.Path, r.Line, r.Effect)
	} else {
		printLine(e.stdout, "rule:      none")
	}
	printLine(e.stdout, "reason:    %s", d.Reason)
	if len(d.WouldDeny) > 0 {
		printLine(e.stdout, "report:    would be denied by %s (report mode)", strings.Join(d.WouldDeny, ", "))
	}
	if r := d.Rule; r != nil && d.Result == policy.Allow {
		printLine(e.stdout, "runs:      %s, sandbox %s, workspace %s, timeout %s", r.Resolved, r.Sandbox, r.Workspace, r.Timeout)
		if c := d.Confirm; c != nil {
			printLine(e.stdout, "confirm:   needs an approver's decision within %s (rule %s)", d.ConfirmTimeout, c.Name)
		}
		if r.Rate != nil {
			printLine(e.stdout, "rate:      %d a minute per principal, burst %d", r.Rate.PerMinute, r.Rate.Burst)
		}
	}
}
