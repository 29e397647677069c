// Package gitremote is git-remote-coily, the git remote helper for
// addresses coily::/git/HOST/PATH: git through coily's git proxy where
// plain HTTPS cannot reach it (the local socket git.sock).
//
// git runs `git-remote-coily REMOTE ADDRESS` for a URL coily::ADDRESS. The
// helper checks the address (ParseAddress), opens a loopback HTTP listener
// for the one git command, and runs git's own HTTP transport, `git
// remote-http REMOTE http://127.0.0.1:PORT/git/HOST/PATH`, on its standard
// input and output: the smart HTTP protocol is git's from end to end. The
// listener takes only requests that carry a random secret (a bearer token
// git sends through http.extraHeader, set in its environment, so no other
// local user can read it from a command line) and name the repository's
// smart HTTP endpoints; it streams each to the proxy and closes when git's
// transport exits.
package gitremote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/visible"
)

// Exit codes: git reports a helper's failure by its own message; these
// tell a script which failure it was.
const (
	exitUsage       = 2
	exitUnreachable = 69
	exitFailure     = 128 // what git's own transports exit with on a fatal error
)

// Name is the helper's program name, the one git looks for on PATH.
const Name = "git-remote-coily"

// Config is one run of the helper.
type Config struct {
	Args    []string // git-remote-coily REMOTE ADDRESS
	Getenv  func(string) string
	Environ []string // the environment git's transport inherits
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Git is the git program ("" : git on PATH).
	Git string

	// listening is told the listener's address and secret (tests).
	listening func(addr, secret string)
}

// Main runs the helper on the process's arguments and streams, and
// returns its exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Config{Args: os.Args, Getenv: os.Getenv, Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
}

// Run runs the helper: it refuses an address it cannot serve or a route
// it has no transport for, then serves git's transport until it exits,
// and returns its exit code.
func Run(ctx context.Context, c Config) int {
	if len(c.Args) != 3 {
		fmt.Fprintf(c.Stderr, "usage: %s REMOTE coily::/git/HOST/OWNER/REPO (git runs it for coily:: URLs; coily git setup writes them)\n", Name)
		return exitUsage
	}
	repo, err := ParseAddress(c.Args[2])
	if err != nil {
		fmt.Fprintf(c.Stderr, "coily: refused git address %s: %v\n", visible.Word(c.Args[2]), err)
		return exitUsage
	}
	transport, via, code, err := proxyTransport(client.SettingsFromEnv(c.Getenv), c.Getenv)
	if err != nil {
		fmt.Fprintf(c.Stderr, "coily: %v\n", err)
		return code
	}
	env, err := transportEnv(c.Environ)
	if err != nil {
		fmt.Fprintf(c.Stderr, "coily: %v\n", err)
		return exitUsage
	}
	return serve(ctx, c, repo, transport, via, env)
}

// proxyTransport is the way to the proxy for the route the settings
// name, and what it is (for messages); err says why there is none, with
// the helper's exit code.
func proxyTransport(s client.Settings, getenv func(string) string) (http.RoundTripper, string, int, error) {
	if s.Where(true) == client.RouteFolder {
		t, via, err := newFolderTransport(getenv)
		if err != nil {
			return nil, "", exitUnreachable, fmt.Errorf("git through the shared folder: %w", err)
		}
		return t, via, 0, nil
	}
	socket, err := gitSocket(s)
	if err != nil {
		return nil, "", exitUsage, err
	}
	if _, err := os.Stat(socket); err != nil {
		return nil, "", exitUnreachable, fmt.Errorf("git proxy unreachable: %w", err)
	}
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	return socketTransport(dial), socket, 0, nil
}

// gitSocket is the proxy's local socket, for the route the settings name
// (not the shared folder's); the other routes have no transport in the
// helper.
func gitSocket(s client.Settings) (string, error) {
	switch route := s.Where(true); route {
	case client.RouteSocket:
		return s.GitSocketPath(), nil
	case client.RouteServer:
		return "", fmt.Errorf("COILY_SERVER is set: on the tailnet git reaches the proxy over https (coily git setup --server %s writes the rewrite); coily:: is for the local socket", visible.Word(s.Server))
	default:
		return "", fmt.Errorf("the %s route (COILY_DEV or COILY_TSNET) has no git transport: use the local socket, or coily git setup --server on a machine on the tailnet", route)
	}
}

// serve listens on loopback, runs git's transport against it, and closes
// the listener when the transport exits.
func serve(ctx context.Context, c Config, repo Repo, transport http.RoundTripper, via string, env []string) int {
	secret, err := newSecret()
	if err != nil {
		fmt.Fprintf(c.Stderr, "coily: %v\n", err)
		return exitFailure
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(c.Stderr, "coily: loopback listener: %v\n", err)
		return exitFailure
	}
	fwd := newForwarder(repo, secret, transport, c.Stderr)
	srv := &http.Server{Handler: fwd, MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	if c.listening != nil {
		c.listening(ln.Addr().String(), secret)
	}
	if c.Getenv("COILY_VERBOSE") != "" {
		fmt.Fprintf(c.Stderr, "coily: git-remote-coily: %s through %s on %s\n", repo.ProxyPath(), via, ln.Addr())
	}
	gitProg := c.Git
	if gitProg == "" {
		gitProg = "git"
	}
	url := "http://" + ln.Addr().String() + repo.ProxyPath()
	cmd := exec.Command(gitProg, "remote-http", c.Args[1], url)
	// An empty http.extraHeader drops the caller's (which would reach
	// only this listener, and could hide the secret's header).
	cmd.Env = append(env, gitConfig(c.Environ, "http.extraHeader", "", "http.extraHeader", "Authorization: Bearer "+secret,
		"http.followRedirects", "false")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	return runTransport(ctx, cmd, c.Stderr)
}

// runTransport runs git's transport to its end, passing on an interrupt,
// and returns its exit code.
func runTransport(ctx context.Context, cmd *exec.Cmd, stderr io.Writer) int {
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "coily: git remote-http: %v\n", err)
		return exitFailure
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
	}
	fmt.Fprintf(stderr, "coily: git remote-http: %v\n", err)
	return exitFailure
}

func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// proxyEnv are the variables that would send git's requests to the
// loopback listener through an HTTP proxy: the secret would go to it.
var proxyEnv = []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"}

// transportEnv is the environment of git's transport: environ without
// proxy settings, with every host exempt from a configured proxy
// (http.proxy), and GIT_CONFIG_COUNT checked so that the helper's
// settings can follow the caller's.
func transportEnv(environ []string) ([]string, error) {
	var env []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(proxyEnv, k) {
			env = append(env, kv)
		}
	}
	if _, err := configCount(environ); err != nil {
		return nil, err
	}
	return append(env, "no_proxy=*", "NO_PROXY=*"), nil
}

// gitConfig is the environment that adds the configuration pairs kv
// (key, value, key, value …) after the caller's own GIT_CONFIG_KEY_n,
// so git applies them last: they win.
func gitConfig(environ []string, kv ...string) []string {
	n, _ := configCount(environ)
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", n, kv[i]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", n, kv[i+1]))
		n++
	}
	return append(out, "GIT_CONFIG_COUNT="+strconv.Itoa(n))
}

// configCount is the caller's GIT_CONFIG_COUNT (0 when unset).
func configCount(environ []string) (int, error) {
	v := ""
	for _, kv := range environ {
		if s, ok := strings.CutPrefix(kv, "GIT_CONFIG_COUNT="); ok {
			v = s
		}
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 10000 {
		return 0, fmt.Errorf("GIT_CONFIG_COUNT=%s: not a count", visible.Word(v))
	}
	return n, nil
}
