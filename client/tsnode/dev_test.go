//go:build coilydev

package tsnode

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDialDevNotRunning points the dev dialer at state directories no
// `coily dev` serves: it says so at once, instead of waiting for the
// tailnet join's timeout.
func TestDialDevNotRunning(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String()
	closed.Close()
	notControl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer notControl.Close()
	redirect := httptest.NewServer(http.RedirectHandler(deadURL+"/generate_204", http.StatusFound))
	defer redirect.Close()

	for name, controlURL := range map[string]string{
		"no dev.json":            "",
		"killed, dev.json stale": deadURL,
		"another server":         notControl.URL,
		"a redirect":             redirect.URL,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if controlURL != "" {
				data, _ := json.Marshal(DevInfo{ControlURL: controlURL, Server: "coily:7443", Socket: filepath.Join(dir, "coily.sock")})
				if err := os.WriteFile(filepath.Join(dir, DevInfoFile), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			c, err := DialDev(ctx, dir, "owner")
			if err == nil {
				c.Close()
				t.Fatal("dialled a coily dev that is not running")
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v to say it is not running", took)
			}
			want := "coily dev is not running with state dir " + dir + " (start it with `coily dev --state-dir " + dir + "`)"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want %q", err, want)
			}
		})
	}
}
