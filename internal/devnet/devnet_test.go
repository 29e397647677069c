package devnet

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// hostileRequests are requests no tailscale node sends: each is answered,
// never a panic of the process.
var hostileRequests = []struct{ method, path string }{
	{"GET", "/"},
	{"GET", "/favicon.ico"},
	{"POST", "/machine/register"},
	{"GET", "/machine/tka/init/begin"},
	{"POST", "/c2n/x"},
	{"GET", "/machine/webclient/x"},
	{"GET", "//key"},
	{"GET", "/key/../"},
	{"PUT", "/ts2021"},
	{"GET", "/ts2021"},
	{"DELETE", "/generate_204"},
}

// TestHostileRequestsToEveryPort sends unhandled HTTP requests and garbage
// bytes to the control server, the DERP relay and the STUN responder, and
// then joins a node: the net still serves (testcontrol used to panic the
// process on `GET /`).
func TestHostileRequestsToEveryPort(t *testing.T) {
	n, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	node := n.DERPMap.Regions[1].Nodes[0]
	derp := "127.0.0.1:" + strconv.Itoa(node.DERPPort)
	control := n.ControlURL[len("http://"):]

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, base := range []string{n.ControlURL, "https://" + derp} {
		for _, hr := range hostileRequests {
			req, err := http.NewRequest(hr.method, base+hr.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Logf("%s %s%s: %v", hr.method, base, hr.path, err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if base == n.ControlURL && hr.path != "/ts2021" && hr.path != "/generate_204" && resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s: %s, want 404", hr.method, hr.path, resp.Status)
			}
		}
	}
	for _, addr := range []string{control, derp} {
		for _, junk := range [][]byte{{0, 1, 2, 0xff}, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []byte("\x16\x03\x01\x00\x05hello"), make([]byte, 70000)} {
			sendJunk(t, "tcp", addr, junk)
		}
	}
	stun := "127.0.0.1:" + strconv.Itoa(node.STUNPort)
	for _, junk := range [][]byte{{}, {0}, make([]byte, 20), []byte("\x00\x01\x00\x00\x21\x12\xa4\x42garbage")} {
		sendJunk(t, "udp", stun, junk)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Join(ctx, n.ControlURL, NodeOptions{Dir: t.TempDir(), Hostname: "after", Tags: []string{"tag:agent"}, Ephemeral: true})
	if err != nil {
		t.Fatalf("the net no longer serves after hostile requests: %v", err)
	}
	s.Close()
}

// sendJunk writes data to addr and reads what comes back until the peer
// closes or a short deadline passes.
func sendJunk(t *testing.T, network, addr string, data []byte) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = c.Write(data)
	_, _ = io.Copy(io.Discard, c)
}
