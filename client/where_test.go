package client

import (
	"path/filepath"
	"testing"
)

// TestWhere: the one resolver every client (coily, coily-client,
// coily-exec and its shims) asks where the server is. The command line's
// --socket wins; a sandbox takes exec to the shared folder unless the
// command line names a transport; then coily dev, an own tailnet node,
// the tailnet through tailscaled, the local socket. A setting that names
// a route is never dropped for the local socket.
func TestWhere(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		edit func(*Settings)
		exec bool
		want Route
	}{
		{"nothing", nil, nil, true, RouteSocket},
		{"socket", map[string]string{"COILY_SOCKET": "/s"}, nil, true, RouteSocket},
		{"dev", map[string]string{"COILY_DEV": "/tmp/d"}, nil, true, RouteDev},
		{"dev over server", map[string]string{"COILY_DEV": "/tmp/d", "COILY_SERVER": "coily"}, nil, false, RouteDev},
		{"server", map[string]string{"COILY_SERVER": "coily"}, nil, true, RouteServer},
		{"tsnet", map[string]string{"COILY_SERVER": "coily", "COILY_TSNET": "1"}, nil, true, RouteTsnet},
		{"tsnet false", map[string]string{"COILY_SERVER": "coily", "COILY_TSNET": "false"}, nil, true, RouteServer},
		{"tsnet not a boolean is not false", map[string]string{"COILY_TSNET": "yes"}, nil, true, RouteTsnet},
		{"sandbox exec", map[string]string{"SANDBOX_RUNTIME": "1", "COILY_SERVER": "coily"}, nil, true, RouteFolder},
		{"sandbox status", map[string]string{"SANDBOX_RUNTIME": "1"}, nil, false, RouteSocket},
		{"sandbox, --server named", map[string]string{"SANDBOX_RUNTIME": "1", "COILY_SERVER": "coily"}, func(s *Settings) { s.Named = true }, true, RouteServer},
		{"--socket wins over dev", map[string]string{"COILY_DEV": "/tmp/d"}, func(s *Settings) { s.SocketNamed, s.Named = true, true }, true, RouteSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SettingsFromEnv(func(k string) string { return tc.env[k] })
			if tc.edit != nil {
				tc.edit(&s)
			}
			if got := s.Where(tc.exec); got != tc.want {
				t.Errorf("Where(%v) = %s, want %s (%+v)", tc.exec, got, tc.want, s)
			}
		})
	}
	s := SettingsFromEnv(func(k string) string { return map[string]string{"COILY_STATE_DIR": "/var/x"}[k] })
	if got := s.SocketPath(); got != filepath.Join("/var/x", "coily.sock") {
		t.Errorf("socket in the state dir: %s", got)
	}
	if got := (Settings{Socket: "/s", StateDir: "/var/x"}).SocketPath(); got != "/s" {
		t.Errorf("COILY_SOCKET over the state dir: %s", got)
	}
	if got := s.GitSocketPath(); got != filepath.Join("/var/x", "git.sock") {
		t.Errorf("git socket in the state dir: %s", got)
	}
	if got := (Settings{Socket: "/run/c/coily.sock", StateDir: "/var/x"}).GitSocketPath(); got != "/run/c/git.sock" {
		t.Errorf("git socket beside COILY_SOCKET: %s", got)
	}
}
