package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"coily.dev/coily/client"
	"coily.dev/coily/client/gitremote"
)

// coily git setup sends git's URLs for a host through coily's git proxy
// with git's own url.<base>.insteadOf rewrites, written and removed by
// `git config` itself. insteadOf applies to pushes too (no pushInsteadOf
// is needed), and the ssh forms of the host's URLs are rewritten as well:
// the agent holds no ssh key either.

func (a *App) gitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "git",
		Short: "send git clone, fetch, pull and push through coily's git proxy",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { cmd.Help(); return Exit(ExitUsage) },
	}
	cmd.AddCommand(a.gitSetupCmd())
	return cmd
}

func (a *App) gitSetupCmd() *cobra.Command {
	var o gitSetup
	cmd := &cobra.Command{
		Use:   "setup [--global] [--host HOST]... [--undo] [--dry-run]",
		Short: "write the git configuration that sends a host's URLs through coily",
		Long: `Write url.BASE.insteadOf rewrites with git config (in the repository of the working
directory, or with --global the user's), so that git clone https://github.com/alice/app, fetch,
pull and push go through coily's git proxy unchanged: no token, ssh key or credential helper on
this side, and pushes checked by the policy on the ref updates they make. The https, ssh and
scp-like (git@HOST:) URLs of each --host are rewritten.

BASE is http://SERVER:7444/git/HOST/ with --server (the git proxy's own port on the tailnet,
where WireGuard encrypts the link; --proxy-url for another address), else coily::/git/HOST/ for
the local socket (git runs git-remote-coily, which must be on PATH). --undo removes exactly the rewrites this command writes
for the same flags; a rewrite of the same URL to another place is refused, not overwritten.`,
		Example: `  coily git setup --global                        # github.com through the local socket
  coily --server coily.tail1234.ts.net git setup --global
  coily git setup --host github.com --host gitlab.example.com
  coily git setup --global --undo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := a.gitBase(o.proxyURL)
			if err != nil {
				return err
			}
			rw, err := gitRewrites(base, o.hosts)
			if err != nil {
				return err
			}
			return a.applyGitSetup(cmd.Context(), o, rw)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.global, "global", false, "write the user's git configuration (default: the repository's)")
	Twin(f, "global", "COILY_GIT_GLOBAL")
	f.StringArrayVar(&o.hosts, "host", []string{"github.com"}, "a git host whose URLs go through coily (repeatable)")
	Twin(f, "host", "COILY_GIT_HOST")
	f.StringVar(&o.proxyURL, "proxy-url", "", "the git proxy's address on the tailnet, http(s)://HOST[:PORT] (default http://SERVER:7444, SERVER from --server)")
	Twin(f, "proxy-url", "COILY_GIT_PROXY_URL")
	f.BoolVar(&o.undo, "undo", false, "remove the rewrites instead of writing them")
	Twin(f, "undo", "COILY_GIT_UNDO")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the git config commands, run none")
	Twin(f, "dry-run", "COILY_GIT_DRY_RUN")
	return cmd
}

type gitSetup struct {
	global, undo, dryRun bool
	hosts                []string
	proxyURL             string
}

// gitRewrite is one url.BASE.insteadOf = PREFIX line.
type gitRewrite struct{ base, prefix string }

func (r gitRewrite) key() string { return "url." + r.base + ".insteadOf" }

// gitBase is the proxy's base URL for a host on the route the settings
// name: the tailnet's https (or --proxy-url), or coily:: for the local
// socket and a sandbox's shared folder; the routes git cannot take are
// refused.
func (a *App) gitBase(proxyURL string) (func(host string) string, error) {
	s := a.Settings()
	route := s.Where(false)
	if s.Where(true) == client.RouteFolder { // git-remote-coily takes the folder as coily exec does
		route = client.RouteFolder
	}
	if proxyURL != "" {
		u, err := url.Parse(proxyURL)
		if err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" || u.User != nil ||
			strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || CheckServer(u.Host) != nil {
			return nil, Usagef("--proxy-url %q: want http(s)://HOST[:PORT]", proxyURL)
		}
		root := u.Scheme + "://" + u.Host
		return func(h string) string { return root + "/git/" + h + "/" }, nil
	}
	switch route {
	case client.RouteServer:
		if err := CheckServers(s.Server); err != nil {
			return nil, err
		}
		if len(s.Servers()) > 1 {
			return nil, Usagef("--server %q: git's rewrite names one server: a Tailscale Service's name (coily serve --service), or one host", s.Server)
		}
		host := s.Server
		if h, _, err := net.SplitHostPort(s.Server); err == nil {
			host = h // the API's port; the proxy has its own
		}
		root := "http://" + net.JoinHostPort(host, strconv.Itoa(client.GitPort))
		return func(h string) string { return root + "/git/" + h + "/" }, nil
	case client.RouteSocket, client.RouteFolder:
		return func(h string) string { return "coily::/git/" + h + "/" }, nil
	}
	return nil, Usagef("the %s route has no git transport: use the local socket or --server (with this machine's tailscale)", route)
}

// gitRewrites are the rewrites for hosts: https, ssh and scp-like URLs.
func gitRewrites(base func(string) string, hosts []string) ([]gitRewrite, error) {
	if len(hosts) == 0 {
		return nil, Usagef("no --host")
	}
	var out []gitRewrite
	for _, h := range hosts {
		if err := gitremote.CheckHost(h); err != nil {
			return nil, Usagef("--host: %v", err)
		}
		b := base(h)
		out = append(out, gitRewrite{b, "https://" + h + "/"})
		if name, _, hasPort := strings.Cut(h, ":"); !hasPort {
			out = append(out, gitRewrite{b, "ssh://git@" + name + "/"}, gitRewrite{b, "git@" + name + ":"})
		}
	}
	return out, nil
}

func (a *App) applyGitSetup(ctx context.Context, o gitSetup, rw []gitRewrite) error {
	scope := "--local"
	if o.global {
		scope = "--global"
	}
	var cmds [][]string
	if o.undo {
		for _, r := range rw {
			cmds = append(cmds, []string{"config", scope, "--fixed-value", "--unset-all", r.key(), r.prefix})
		}
	} else {
		if err := a.gitConflicts(ctx, rw); err != nil {
			return err
		}
		for _, r := range rw {
			cmds = append(cmds, []string{"config", scope, "--fixed-value", "--replace-all", r.key(), r.prefix, r.prefix})
		}
	}
	for _, args := range cmds {
		if o.dryRun {
			PrintLine(a.Stdout, "%s", Argv(append([]string{"git"}, args...)))
			continue
		}
		out, err := gitOutput(ctx, args...)
		if err != nil && !(o.undo && exitCode(err) == 5) { // 5: nothing to unset
			return fmt.Errorf("git %s: %w: %s", strings.Join(args[:3], " "), err, Text(strings.TrimSpace(out)))
		}
	}
	if o.undo && !o.dryRun {
		return a.removeEmptySections(ctx, scope, rw)
	}
	if !o.dryRun {
		for _, r := range rw {
			PrintLine(a.Stdout, "%s %s", r.key(), r.prefix)
		}
	}
	return nil
}

// gitConflicts refuses a rewrite of one of the same URLs to another
// place, in any of git's configuration files: git takes the first of
// equal length, so which one wins would depend on the files' order.
func (a *App) gitConflicts(ctx context.Context, rw []gitRewrite) error {
	out, err := gitOutput(ctx, "config", "--get-regexp", `^url\..*\.insteadof$`)
	if err != nil && exitCode(err) != 1 { // 1: none
		return fmt.Errorf("git config --get-regexp: %w: %s", err, Text(strings.TrimSpace(out)))
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		key, value, _ := strings.Cut(line, " ")
		base := strings.TrimSuffix(strings.TrimPrefix(key, "url."), ".insteadof")
		for _, r := range rw {
			if value == r.prefix && base != r.base {
				PrintLine(a.Stderr, "%s: git already rewrites %s to %s (%s): remove that first (git config --unset), nothing written", a.Name, r.prefix, base, key)
				return Exit(ExitFailure)
			}
		}
	}
	return nil
}

// removeEmptySections removes the url.BASE sections --undo left empty,
// so the configuration reads as before setup.
func (a *App) removeEmptySections(ctx context.Context, scope string, rw []gitRewrite) error {
	done := map[string]bool{}
	for _, r := range rw {
		if done[r.base] {
			continue
		}
		done[r.base] = true
		out, err := gitOutput(ctx, "config", scope, "--get-regexp", "^url\\."+ereQuote(r.base)+"\\.")
		if err == nil && strings.TrimSpace(out) != "" {
			continue // other settings of the section stay
		}
		out, err = gitOutput(ctx, "config", scope, "--remove-section", "url."+r.base)
		switch {
		case err == nil:
			PrintLine(a.Stdout, "removed url.%s", r.base)
		case exitCode(err) != 128: // 128: no such section
			return fmt.Errorf("git config --remove-section: %w: %s", err, Text(strings.TrimSpace(out)))
		}
	}
	return nil
}

// ereQuote quotes s for a POSIX extended regular expression.
func ereQuote(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.[]{}()*+?^$|`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func gitOutput(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func exitCode(err error) int {
	var x *exec.ExitError
	if errors.As(err, &x) {
		return x.ExitCode()
	}
	return -1
}
