package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
)

// BenchmarkProxyVsDirect measures, on loopback, the latency of a new
// connection plus one round trip through the proxy (unix socket, CONNECT,
// tunnel) against the same done directly, interleaved; and the bulk
// throughput of a tunnel against a direct connection.
func BenchmarkProxyVsDirect(b *testing.B) {
	echo := benchEcho(b)
	port := strconv.Itoa(echo)
	al, _ := NewAllowlist([]string{"ok.test:" + port}, loopback)
	p, err := New(Config{Rule: "bench", Allowlist: al, Resolver: newResolver("ok.test", "127.0.0.1")})
	if err != nil {
		b.Fatal(err)
	}
	sock := b.TempDir() + "/egress.sock"
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); p.Serve(l) }()
	defer func() { p.Close(); <-done }()

	direct := func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+port) }
	proxied := func() (net.Conn, error) { return dialThrough(sock, "ok.test:"+port) }
	var viaProxy, viaDirect []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaDirect = append(viaDirect, roundTrip(b, direct))
		viaProxy = append(viaProxy, roundTrip(b, proxied))
	}
	b.StopTimer()
	benchstat.Report(b, "direct", viaDirect)
	benchstat.Report(b, "proxy", viaProxy)
	b.ReportMetric(benchstat.Added(viaProxy, viaDirect, 50), "added-p50-ms")

	const bulk = 64 << 20
	dd := bulkTransfer(b, direct, bulk)
	pd := bulkTransfer(b, proxied, bulk)
	b.ReportMetric(float64(bulk)/dd.Seconds()/1e6, "direct-MB/s")
	b.ReportMetric(float64(bulk)/pd.Seconds()/1e6, "proxy-MB/s")
	b.ReportMetric(dd.Seconds()/pd.Seconds(), "throughput-ratio")
}

func dialThrough(sock, target string) (net.Conn, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, connect(target)); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, err
	}
	return &bufConn{Conn: c, r: br}, nil
}

func roundTrip(b *testing.B, dial func() (net.Conn, error)) time.Duration {
	start := time.Now()
	c, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := []byte{'x'}
	if _, err := c.Write(buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// bulkTransfer sends n bytes to the echo server and reads them back.
func bulkTransfer(b *testing.B, dial func() (net.Conn, error), n int64) time.Duration {
	c, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	go func() {
		io.CopyN(c, zeros{}, n)
	}()
	if _, err := io.CopyN(io.Discard, c, n); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func benchEcho(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}
