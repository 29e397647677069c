//go:build coilydev

package tsnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/internal/devnet"
)

// The coily dev tailnet (development builds only, -tags coilydev: its
// control server and DERP relay are Tailscale's test components).

// DevInfo is what `coily dev` writes to DIR/dev.json for its clients.
type DevInfo struct {
	ControlURL string `json:"control_url"`
	Server     string `json:"server"` // HOST:PORT on the dev tailnet
	Socket     string `json:"socket"`
}

// DevInfoFile is the file name of DevInfo in a dev state directory.
const DevInfoFile = "dev.json"

// ReadDevInfo reads DIR/dev.json.
func ReadDevInfo(dir string) (DevInfo, error) {
	var d DevInfo
	data, err := os.ReadFile(filepath.Join(dir, DevInfoFile))
	if err != nil {
		return d, fmt.Errorf("%w: %w", notRunning(dir), err)
	}
	if err := json.Unmarshal(data, &d); err != nil || d.ControlURL == "" || d.Server == "" {
		return d, errors.Join(errors.New("malformed "+DevInfoFile), err)
	}
	return d, nil
}

// DialDev joins the dev tailnet of `coily dev --state-dir dir` as an
// ephemeral node tagged tag:<as> and connects to its server.
func DialDev(ctx context.Context, dir, as string) (*client.Client, error) {
	info, err := ReadDevInfo(dir)
	if err != nil {
		return nil, &client.DialError{Err: err}
	}
	if err := checkDevRunning(ctx, info.ControlURL); err != nil {
		return nil, &client.DialError{Err: fmt.Errorf("%w: its control server at %s: %w", notRunning(dir), info.ControlURL, err)}
	}
	return DialDevNet(ctx, info.ControlURL, info.Server, "coily-"+as, []string{"tag:" + as})
}

// DialDevNet joins the dev tailnet at controlURL as an ephemeral node and
// connects to server.
func DialDevNet(ctx context.Context, controlURL, server, hostname string, tags []string) (*client.Client, error) {
	dir, err := os.MkdirTemp("", "coily-tsnet-")
	if err != nil {
		return nil, &client.DialError{Err: fmt.Errorf("tsnet state: %w", err)}
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := devnet.Join(jctx, controlURL, devnet.NodeOptions{Dir: dir, Hostname: hostname, Tags: tags, Ephemeral: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, &client.DialError{Err: fmt.Errorf("join the dev tailnet: %w", err)}
	}
	return Connect(ctx, s, server, 30*time.Second, func() { s.Close(); os.RemoveAll(dir) })
}

// notRunning is the error of a client pointed at a state directory no
// `coily dev` serves.
func notRunning(dir string) error {
	return fmt.Errorf("coily dev is not running with state dir %s (start it with `coily dev --state-dir %s`)", dir, dir)
}

// checkDevRunning asks the dev net's control server at controlURL for its
// connectivity check, within two seconds: a `coily dev` that was killed
// leaves its dev.json behind, and joining a control server nobody runs
// waits for the join's whole timeout.
func checkDevRunning(ctx context.Context, controlURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, controlURL+"/generate_204", nil)
	if err != nil {
		return err
	}
	hc := &http.Client{
		Transport:     &http.Transport{Proxy: nil}, // loopback, never through a proxy
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("answered %s, not a control server's 204", resp.Status)
	}
	return nil
}
