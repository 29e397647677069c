package tailnet

import (
	"context"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"coily.dev/coily/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestTailnetResolver(t *testing.T) {
	present := func(string) (os.FileInfo, error) { return nil, nil }
	missing := func(string) (os.FileInfo, error) { return nil, fs.ErrNotExist }
	denied := func(string) (os.FileInfo, error) { return nil, fs.ErrPermission }
	tests := []struct {
		goos string
		stat func(string) (os.FileInfo, error)
		want string
	}{
		{"linux", missing, ""}, // Go's defaults there are the system's business
		{"linux", present, ""},
		{"darwin", missing, ""},
		{"android", present, ""}, // a resolv.conf someone made: the system's
		{"android", missing, magicDNS},
		{"android", denied, magicDNS},
	}
	for _, tt := range tests {
		if got := tailnetResolver(tt.goos, tt.stat); got != tt.want {
			t.Errorf("tailnetResolver(%s, …) = %q, want %q", tt.goos, got, tt.want)
		}
	}
}

// TestLocalAPIMayAnswer: on Linux and Android a missing LocalAPI socket
// (the phone: the Tailscale app has none Termux reaches) is not asked,
// as asking waits two seconds (tailscale's client retries for a starting
// tailscaled); elsewhere, or with the socket there, it is.
func TestLocalAPIMayAnswer(t *testing.T) {
	present := func(string) (os.FileInfo, error) { return nil, nil }
	missing := func(string) (os.FileInfo, error) { return nil, fs.ErrNotExist }
	denied := func(string) (os.FileInfo, error) { return nil, fs.ErrPermission }
	tests := []struct {
		goos string
		stat func(string) (os.FileInfo, error)
		want bool
	}{
		{"android", missing, false},
		{"android", denied, false},
		{"android", present, true},
		{"linux", missing, false},
		{"linux", present, true},
		{"darwin", missing, true}, // the app's LocalAPI is no socket file
		{"windows", missing, true},
	}
	for _, tt := range tests {
		if got := localAPIMayAnswer(tt.goos, "/var/run/tailscale/tailscaled.sock", tt.stat); got != tt.want {
			t.Errorf("localAPIMayAnswer(%s, …) = %v, want %v", tt.goos, got, tt.want)
		}
	}
}

// TestDNSDialerAsksTheNamedServer: a dialer naming a DNS server resolves
// the name there — a real DNS server on loopback standing in for
// 100.100.100.100 — and reach the address it answers.
func TestDNSDialerAsksTheNamedServer(t *testing.T) {
	const name = "coily.example-tailnet.ts.net."
	var queries atomic.Int32
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out, err := answerA(buf[:n], name, &queries); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	_, port, _ := net.SplitHostPort(ln.Addr().String())
	target := net.JoinHostPort(strings.TrimSuffix(name, "."), port)
	c := client.New(dnsDialer(target, pc.LocalAddr().String()), target, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Conn().Invoke(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err != nil {
		t.Fatalf("health check through %s: %v", target, err)
	}
	if queries.Load() == 0 {
		t.Error("the named DNS server was never asked")
	}
}

// answerA answers an A query for name with 127.0.0.1, its other queries
// with no records, other names with NXDOMAIN.
func answerA(query []byte, name string, queries *atomic.Int32) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	ours := strings.EqualFold(q.Name.String(), name)
	rcode := dnsmessage.RCodeNameError
	if ours {
		queries.Add(1)
		rcode = dnsmessage.RCodeSuccess
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if ours && q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
		if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
