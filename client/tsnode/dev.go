//go:build coilydev

package tsnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
		return d, fmt.Errorf("no coily dev running with state dir %s (start one with `coily dev --state-dir %s`): %w", dir, dir, err)
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
