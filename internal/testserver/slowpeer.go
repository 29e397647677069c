package testserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Held is what became of a connection a slow peer held: when it was
// opened and closed, and how many bytes the server sent on it.
type Held struct {
	Opened, Closed time.Time
	Bytes          int64
}

// HoldHeaders is a slow peer on c: it sends the start of an HTTP request
// to host, then one more byte of a header every tick, and never ends the
// headers, until the server closes c. The channel says when it did.
func HoldHeaders(c net.Conn, host string, tick time.Duration) <-chan Held {
	out := make(chan Held, 1)
	opened := time.Now()
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		n, _ := io.Copy(io.Discard, c)
		out <- Held{Opened: opened, Closed: time.Now(), Bytes: n}
		c.Close()
	}()
	go func() {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\nX-Slow: "); err != nil {
			return
		}
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	return out
}

// HoldMany opens n connections with dial at once (so that the server
// accepts them all well within its timeouts) and holds each with
// HoldHeaders; the channel delivers each as the server closes it.
func HoldMany(t testing.TB, n int, dial func() (net.Conn, error), host string, tick time.Duration) <-chan Held {
	t.Helper()
	conns, errs := make(chan net.Conn, n), make(chan error, n)
	for range n {
		go func() {
			c, err := dial()
			if err != nil {
				errs <- err
				return
			}
			conns <- c
		}()
	}
	out := make(chan Held, n)
	for range n {
		select {
		case c := <-conns:
			go func() { out <- <-HoldHeaders(c, host, tick) }()
		case err := <-errs:
			t.Fatalf("dial: %v", err)
		}
	}
	return out
}

// Partial is the server's answer to a request a peer never finished
// sending: its status, and how long after the request began the answer
// arrived and the server closed the connection.
type Partial struct {
	Status           int
	Answered, Closed time.Duration
}

// SendPartial sends head (a request's line, headers and the start of its
// body) on c and nothing more, and reads the answer; the test fails if
// there is none within a minute.
func SendPartial(t testing.TB, c net.Conn, head string) Partial {
	t.Helper()
	defer c.Close()
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(time.Minute)); err != nil { // bounds the test, not the server
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a request not sent in full: %v", err)
	}
	p := Partial{Status: resp.StatusCode, Answered: time.Since(start)}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the connection was not closed after the answer: %v", err)
	}
	p.Closed = time.Since(start)
	return p
}
