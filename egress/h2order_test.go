package egress

import (
	"io"
	"net/http"
	"testing"
	"time"

	"coily.dev/coily/internal/standin"
)

// TestInspectH2RowsInArrivalOrder: two streams of one HTTP/2 connection,
// the first answered only after the second is done: the request rows
// are in the order the requests arrived, the late one first.
func TestInspectH2RowsInArrivalOrder(t *testing.T) {
	slowIn, release := make(chan struct{}), make(chan struct{})
	uca := standin.TLS(t)
	srv := uca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(slowIn)
			<-release
		}
		io.WriteString(w, r.URL.Path)
	}), apiHost)
	ca, err := NewAuthority([]string{apiHost}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, Config{Resolver: newResolver(apiHost, "127.0.0.1"), Inspect: &Inspection{CA: ca, Roots: uca.Pool}},
		[]string{apiHost + ":" + srv.Port}, loopback)
	c := tp.client(t, h2Only(caPool(ca)))
	c.Transport.(*http.Transport).DisableKeepAlives = false
	get := func(path string) error {
		resp, err := c.Get("https://" + apiHost + ":" + srv.Port + path)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := get("/warm"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { slow <- get("/slow") }()
	<-slowIn
	if err := get("/fast"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	var reqs []RequestRow
	waitFor(t, "3 request rows", func() bool { reqs, _ = tp.Requests(); return len(reqs) == 3 })
	var paths []string
	for _, r := range reqs {
		paths = append(paths, r.Path.String()+" "+r.Proto)
	}
	if paths[0] != "/warm HTTP/2.0" || paths[1] != "/slow HTTP/2.0" || paths[2] != "/fast HTTP/2.0" {
		t.Errorf("rows %q; want /warm, /slow, /fast over HTTP/2 (the order they arrived)", paths)
	}
}

// TestRequestRowsReserved: a reserved row is listed once set, in its
// place; past MaxRequestRows rows are counted only.
func TestRequestRowsReserved(t *testing.T) {
	var r requestRows
	a, b := r.reserve(), r.reserve()
	r.set(b, requestRow{path: "/b"})
	if got, _ := r.list(nil); len(got) != 1 || got[0].Path.String() != "/b" {
		t.Fatalf("with /a pending: %+v", got)
	}
	r.set(a, requestRow{path: "/a"})
	if got, _ := r.list(nil); len(got) != 2 || got[0].Path.String() != "/a" {
		t.Fatalf("%+v; want /a then /b", got)
	}
	for range MaxRequestRows {
		r.add(requestRow{path: "/x"})
	}
	if got, dropped := r.list(nil); len(got) != MaxRequestRows || dropped != 2 {
		t.Errorf("%d rows, %d dropped; want %d, 2", len(got), dropped, MaxRequestRows)
	}
}
