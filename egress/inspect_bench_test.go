package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
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
// bulk throughput of a 64 MiB download both ways (median, interleaved),
// the inspected one injected into and so scrubbed: as fast as loopback
// and the CPU allow, from an upstream paced like a link, and with clients
// offering HTTP/2.
func BenchmarkInspectVsTunnel(b *testing.B) {
	const bulk = 64 << 20
	uca := standin.TLS(b)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bulk" {
			w.Header().Set("Content-Length", strconv.Itoa(bulk))
			rate, _ := strconv.Atoi(r.URL.Query().Get("rate"))
			pacedZeros(w, bulk, rate)
			return
		}
		io.WriteString(w, "ok")
	})
	srv := uca.Serve(b, h, "inspected.test", "tunnel.test")
	srv2 := uca.ServeH2(b, h, "inspected.test", "tunnel.test").Port
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
	// proto is the HTTP major version each client must be answered in.
	proto := map[*http.Client]int{}
	// h2 is a client offering h2 and http/1.1, as Go tools (gh), curl and
	// git do, or h2 alone; it must be answered in want.
	h2 := func(tr *http.Transport, want int) *http.Client {
		c := tp.client(b, tr)
		c.Transport.(*http.Transport).DisableKeepAlives = false
		b.Cleanup(c.CloseIdleConnections)
		proto[c] = want
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
		if strings.HasPrefix(path, "/bulk") && n != bulk {
			b.Fatalf("%s%s: %d bytes, want %d", host, path, n, bulk)
		}
		if want := proto[c]; want != 0 && resp.ProtoMajor != want {
			b.Fatalf("%s%s: %s, want HTTP/%d", host, path, resp.Proto, want)
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
	// Bulk, interleaved (one transfer swings with the load), with the CPU
	// the whole process used for each (upstream, proxy and client share
	// the machine's cores: what inspection adds is CPU).
	bulkPair := func(prefix string, cT, cI *http.Client, hostT, hostI, path string, reps int) {
		var bt, bi, ut, ui []time.Duration
		for range reps {
			c := cpuTime()
			bt = append(bt, timed(cT, hostT, path))
			c2 := cpuTime()
			bi = append(bi, timed(cI, hostI, path))
			ut, ui = append(ut, c2-c), append(ui, cpuTime()-c2)
		}
		dt, di := benchstat.Percentile(bt, 50), benchstat.Percentile(bi, 50)
		b.ReportMetric(float64(bulk)/dt.Seconds()/1e6, prefix+"tunnel-MB/s")
		b.ReportMetric(float64(bulk)/di.Seconds()/1e6, prefix+"inspect-MB/s")
		b.ReportMetric(dt.Seconds()/di.Seconds(), prefix+"throughput-ratio")
		if path == "/bulk" { // paced, the CPU would be mostly waiting's
			pt, pi := benchstat.Percentile(ut, 50), benchstat.Percentile(ui, 50)
			b.ReportMetric(float64(pt.Milliseconds()), prefix+"tunnel-cpu-ms/64MiB")
			b.ReportMetric(float64(pi.Milliseconds()), prefix+"inspect-cpu-ms/64MiB")
			b.ReportMetric(pt.Seconds()/pi.Seconds(), prefix+"cpu-ratio")
		}
	}
	bulkPair("", warmT, warmI, "tunnel.test", "inspected.test", "/bulk", 5)
	// From an upstream that sends no faster than a link: 1 Gbit/s (a
	// server's NIC, more than most upstreams give one connection) and
	// 5 Gbit/s (what AWS allows one flow leaving its placement group, S3
	// included). The cores are still shared, but the pace, not the CPU,
	// bounds the tunnel: the ratio says whether inspection keeps up.
	bulkPair("paced1G-", warmT, warmI, "tunnel.test", "inspected.test", "/bulk?rate=125", 3)
	bulkPair("paced5G-", warmT, warmI, "tunnel.test", "inspected.test", "/bulk?rate=625", 3)
	// A client offering h2 and http/1.1 (gh, curl, git), from an upstream
	// that offers h2 too (as api.github.com does): the tunnel carries
	// HTTP/2 end to end, the inspected connection HTTP/1.1 on both legs.
	// And a client offering h2 alone: HTTP/2 on both legs either way.
	h2c := func(roots *x509.CertPool, want int) *http.Client {
		return h2(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}, want)
	}
	up2 := ":" + srv2
	bulkPair("h2cap-", h2c(uca.Pool, 2), h2c(mine, 1), "tunnel.test"+up2, "inspected.test"+up2, "/bulk", 5)
	h2T, h2I := h2(h2Only(uca.Pool), 2), h2(h2Only(mine), 2)
	bulkPair("h2only-", h2T, h2I, "tunnel.test"+up2, "inspected.test"+up2, "/bulk", 5)
	bulkPair("h2only-paced1G-", h2T, h2I, "tunnel.test"+up2, "inspected.test"+up2, "/bulk?rate=125", 3)
}

// pacedZeros writes n zero bytes to w, no faster than rate MB/s when
// rate is above 0 (a link's pace, kept to within a block).
func pacedZeros(w io.Writer, n, rate int) {
	if rate <= 0 {
		io.CopyN(w, zeros{}, int64(n))
		return
	}
	const block = 128 << 10
	start := time.Now()
	for sent := 0; sent < n; {
		k := min(block, n-sent)
		if _, err := io.CopyN(w, zeros{}, int64(k)); err != nil {
			return
		}
		sent += k
		time.Sleep(time.Until(start.Add(time.Duration(float64(sent) / float64(rate) * 1e3))))
	}
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
