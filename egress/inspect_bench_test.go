package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/standin"
)

// BenchmarkInspectVsTunnel measures, in one run on loopback, a request
// through an inspected connection (TLS terminated, checked, a placeholder
// swapped, TLS again to the upstream) against the same request through a
// plain CONNECT tunnel to the same upstream, interleaved: on a kept-alive
// connection (warm) and on a new connection each time (cold); and the
// bulk throughput of a 64 MiB download both ways (median of five,
// interleaved), the inspected one injected into and so scrubbed.
func BenchmarkInspectVsTunnel(b *testing.B) {
	const bulk = 64 << 20
	uca := standin.TLS(b)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bulk" {
			w.Header().Set("Content-Length", strconv.Itoa(bulk))
			io.CopyN(w, zeros{}, bulk)
			return
		}
		io.WriteString(w, "ok")
	})
	srv := uca.Serve(b, h, "inspected.test", "tunnel.test")
	srv2 := serveH2Upstream(b, uca, h, "inspected.test", "tunnel.test")
	ca, err := NewAuthority([]string{"inspected.test"}, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ph := NewPlaceholder()
	insp := &Inspection{CA: ca, Roots: uca.Pool, Inject: []Injection{
		{Placeholder: ph, Secret: "s3cr3t-value", Host: "inspected.test", Port: benchPort(b, srv.Port), Form: FormBearer},
		{Placeholder: ph, Secret: "s3cr3t-value", Host: "inspected.test", Port: benchPort(b, srv2), Form: FormBearer}}}
	al, _ := NewAllowlist([]string{"inspected.test:" + srv.Port, "tunnel.test:" + srv.Port, "inspected.test:" + srv2, "tunnel.test:" + srv2}, loopback)
	p, err := New(Config{Rule: "bench", Allowlist: al, Resolver: newResolver("inspected.test", "127.0.0.1", "tunnel.test", "127.0.0.1"), Inspect: insp})
	if err != nil {
		b.Fatal(err)
	}
	tp := &testProxy{Proxy: p, socket: b.TempDir() + "/egress.sock"}
	serveBench(b, p, tp.socket)
	mine := x509.NewCertPool()
	mine.AddCert(ca.Certificate())
	client := func(roots *x509.CertPool, keep bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: !keep,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
		c := tp.client(b, tr)
		c.Transport.(*http.Transport).DisableKeepAlives = !keep
		b.Cleanup(c.CloseIdleConnections)
		return c
	}
	// h2 is a client that speaks HTTP/2 when the server offers it, as Go
	// tools (gh) and curl do.
	h2 := func(roots *x509.CertPool) *http.Client {
		c := tp.client(b, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true})
		c.Transport.(*http.Transport).DisableKeepAlives = false
		b.Cleanup(c.CloseIdleConnections)
		return c
	}
	get := func(c *http.Client, host, path string) {
		if !strings.Contains(host, ":") {
			host += ":" + srv.Port
		}
		req, _ := http.NewRequest("GET", "https://"+host+path, nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s%s: %s", host, path, resp.Status)
		}
		if path == "/bulk" && n != bulk {
			b.Fatalf("%s%s: %d bytes, want %d", host, path, n, bulk)
		}
		if c.Transport.(*http.Transport).ForceAttemptHTTP2 && resp.ProtoMajor != 2 {
			b.Fatalf("%s%s: %s, want HTTP/2", host, path, resp.Proto)
		}
	}
	timed := func(c *http.Client, host, path string) time.Duration {
		start := time.Now()
		get(c, host, path)
		return time.Since(start)
	}
	warmI, warmT := client(mine, true), client(uca.Pool, true)
	coldI, coldT := client(mine, false), client(uca.Pool, false)
	get(warmI, "inspected.test", "/")
	get(warmT, "tunnel.test", "/")
	var wi, wt, ci, ct []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wt = append(wt, timed(warmT, "tunnel.test", "/"))
		wi = append(wi, timed(warmI, "inspected.test", "/"))
		ct = append(ct, timed(coldT, "tunnel.test", "/"))
		ci = append(ci, timed(coldI, "inspected.test", "/"))
	}
	b.StopTimer()
	benchstat.Report(b, "tunnel-warm", wt)
	benchstat.Report(b, "inspect-warm", wi)
	benchstat.Report(b, "tunnel-cold", ct)
	benchstat.Report(b, "inspect-cold", ci)
	b.ReportMetric(benchstat.Added(wi, wt, 50), "added-warm-p50-ms")
	b.ReportMetric(benchstat.Added(ci, ct, 50), "added-cold-p50-ms")
	// Bulk, interleaved five times (one transfer swings with the load),
	// with the CPU the whole process used for each (upstream, proxy and
	// client share the machine's cores: what inspection adds is CPU).
	var bt, bi, ut, ui []time.Duration
	for range 5 {
		c := cpuTime()
		bt = append(bt, timed(warmT, "tunnel.test", "/bulk"))
		c2 := cpuTime()
		bi = append(bi, timed(warmI, "inspected.test", "/bulk"))
		ut, ui = append(ut, c2-c), append(ui, cpuTime()-c2)
	}
	dt, di := benchstat.Percentile(bt, 50), benchstat.Percentile(bi, 50)
	b.ReportMetric(float64(bulk)/dt.Seconds()/1e6, "tunnel-MB/s")
	b.ReportMetric(float64(bulk)/di.Seconds()/1e6, "inspect-MB/s")
	pt, pi := benchstat.Percentile(ut, 50), benchstat.Percentile(ui, 50)
	b.ReportMetric(float64(pt.Milliseconds()), "tunnel-cpu-ms/64MiB")
	b.ReportMetric(float64(pi.Milliseconds()), "inspect-cpu-ms/64MiB")
	b.ReportMetric(pt.Seconds()/pi.Seconds(), "cpu-ratio")
	b.ReportMetric(dt.Seconds()/di.Seconds(), "throughput-ratio")
	// The same bulk with the client allowed HTTP/2, from an upstream that
	// offers it too (as api.github.com does): the tunnel carries HTTP/2
	// end to end; the inspected connection speaks it on both legs. And
	// from the upstream that offers only HTTP/1.1: the inspected client
	// still speaks HTTP/2 to the proxy (the tunnel there is HTTP/1.1 end
	// to end: tunnel-MB/s).
	h2I, h2T := h2(mine), h2(uca.Pool)
	var b1, u1 []time.Duration
	bt, bi, ut, ui = nil, nil, nil, nil
	for range 5 {
		c := cpuTime()
		bt = append(bt, timed(h2T, "tunnel.test:"+srv2, "/bulk"))
		c2 := cpuTime()
		bi = append(bi, timed(h2I, "inspected.test:"+srv2, "/bulk"))
		c3 := cpuTime()
		b1 = append(b1, timed(h2I, "inspected.test", "/bulk"))
		ut, ui, u1 = append(ut, c2-c), append(ui, c3-c2), append(u1, cpuTime()-c3)
	}
	dt, di = benchstat.Percentile(bt, 50), benchstat.Percentile(bi, 50)
	b.ReportMetric(float64(bulk)/dt.Seconds()/1e6, "h2-tunnel-MB/s")
	b.ReportMetric(float64(bulk)/di.Seconds()/1e6, "h2-inspect-MB/s")
	b.ReportMetric(float64(bulk)/benchstat.Percentile(b1, 50).Seconds()/1e6, "h2-inspect-h1up-MB/s")
	pt, pi = benchstat.Percentile(ut, 50), benchstat.Percentile(ui, 50)
	b.ReportMetric(float64(pt.Milliseconds()), "h2-tunnel-cpu-ms/64MiB")
	b.ReportMetric(float64(pi.Milliseconds()), "h2-inspect-cpu-ms/64MiB")
	b.ReportMetric(float64(benchstat.Percentile(u1, 50).Milliseconds()), "h2-inspect-h1up-cpu-ms/64MiB")
	b.ReportMetric(dt.Seconds()/di.Seconds(), "h2-throughput-ratio")
}

// serveH2Upstream serves h over TLS with HTTP/2 offered (ALPN h2, then
// http/1.1) until b ends, and returns its port.
func serveH2Upstream(b *testing.B, ca *standin.CA, h http.Handler, hosts ...string) string {
	leaf, err := ca.Leaf(hosts...)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Listener.Close()
	ts.Listener = ln
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}
	ts.StartTLS()
	b.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAuthority measures what inspection costs an exec before its
// first request: minting its CA and one leaf.
func BenchmarkAuthority(b *testing.B) {
	now := time.Now()
	for i := 0; i < b.N; i++ {
		ca, err := NewAuthority([]string{"api.github.com"}, time.Hour, now)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ca.Leaf("api.github.com"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/exec")
}

// serveBench serves p on a unix socket at sock until b ends.
func serveBench(b *testing.B, p *Proxy, sock string) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); p.Serve(l) }()
	b.Cleanup(func() { p.Close(); <-done })
}

func benchPort(b *testing.B, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
