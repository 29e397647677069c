package egress

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
)

// TestInspectUpstreamConnsCounted: the further upstream connections an
// inspected CONNECT opens (HTTP/2 streams to an HTTP/1.1 upstream) count
// against the rule's max_connections: with a cap of 2, the CONNECT and
// one more upstream connection are all there is; a third concurrent
// request is answered 502 naming the cap, and a new CONNECT 503, while
// they are held.
func TestInspectUpstreamConnsCounted(t *testing.T) {
	var mu sync.Mutex
	remotes, inflight := map[string]bool{}, 0
	release := make(chan struct{})
	uca := standin.TLS(t) // httptest's TLS server: HTTP/1.1 only
	srv := uca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			return
		}
		mu.Lock()
		remotes[r.RemoteAddr] = true
		inflight++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "ok")
	}), apiHost, tunnelHost)
	ca, err := NewAuthority([]string{apiHost}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res := newResolver(apiHost, "127.0.0.1", tunnelHost, "127.0.0.1")
	tp := startProxy(t, Config{Resolver: res, MaxConns: 2, Inspect: &Inspection{CA: ca, Roots: uca.Pool}},
		[]string{apiHost + ":" + srv.Port, tunnelHost + ":" + srv.Port}, loopback)
	c := tp.client(t, h2Only(caPool(ca)))
	c.Transport.(*http.Transport).DisableKeepAlives = false
	if resp, err := c.Get("https://" + apiHost + ":" + srv.Port + "/warm"); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("the first request: %v %v; want HTTP/2 to the proxy", resp, err)
	} else {
		resp.Body.Close()
	}
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			resp, err := c.Get("https://" + apiHost + ":" + srv.Port + "/x")
			if err != nil {
				answers <- answer{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, string(b)}
		}()
	}
	var early []answer
	waitFor(t, "two requests upstream and one answered, or three upstream", func() bool {
		select {
		case a := <-answers:
			early = append(early, a)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return inflight == 3 || (inflight == 2 && len(early) == 1)
	})
	resp, body, _ := tp.raw(t, connect(tunnelHost+":"+srv.Port))
	close(release)
	mu.Lock()
	n, conns := inflight, len(remotes)
	mu.Unlock()
	if n != 2 || conns != 2 {
		t.Errorf("%d requests upstream on %d connections; want 2 on 2 (the cap)", n, conns)
	}
	if len(early) != 1 || early[0].status != http.StatusBadGateway || !strings.Contains(early[0].body, "2 egress connections") {
		t.Errorf("answers before the release %+v; want one 502 naming the cap", early)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "2 egress connections") {
		t.Errorf("a CONNECT while the cap is held: %d %q; want 503", resp.StatusCode, body)
	}
	for range 3 - len(early) {
		if a := <-answers; a.status != 200 {
			t.Errorf("a held request: %+v", a)
		}
	}
	c.CloseIdleConnections()
	waitFor(t, "every connection given back", func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return tp.extra == 0 && len(tp.conns) == 0
	})
}
