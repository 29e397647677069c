package standin

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNpmRegistryNpmInstall(t *testing.T) {
	start := time.Now()
	n := NpmRegistry(t)
	since(t, "NpmRegistry (verdaccio, its user)", start)
	start = time.Now()
	n.Publish(t, DefaultNpmPackage)
	t.Logf("npm publish took %v", time.Since(start).Round(time.Millisecond))
	n.Publish(t, NpmPackage{Name: "standin-app", Version: "2.0.0", Dependencies: map[string]string{"standin-pkg": "^1.0.0"}})

	dir := t.TempDir()
	env := n.Env(t)
	run(t, dir, env, "npm", "install", "--registry", n.URL, "--no-package-lock", "standin-app")
	out := run(t, dir, env, "node", "-e", `console.log(require("standin-app").name, require("standin-pkg").version)`)
	if got, want := strings.TrimSpace(out), "standin-app 1.0.0"; got != want {
		t.Fatalf("node printed %q, want %q", got, want)
	}
	// Offline: a package never published is not fetched from anywhere.
	if out, err := tryRun(t, dir, env, "npm", "install", "--registry", n.URL, "--no-package-lock", "left-pad"); err == nil {
		t.Fatalf("npm installed a package the registry does not hold:\n%s", out)
	}
	// Publishing needs the token.
	req, _ := http.NewRequest(http.MethodPut, n.URL+"standin-intruder", strings.NewReader(`{"name":"standin-intruder"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("publish without a token: status %d, want 401 or 403", resp.StatusCode)
	}
	if b, _ := os.ReadFile(n.Log); strings.Contains(string(b), n.Token) {
		t.Error("verdaccio's log holds the token")
	}
}

func TestNpmContactOnInstall(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	n := NpmRegistry(t, ContactOnInstall("standin-contact", "1.0.0", target.Addr().String()))

	// Directly: the postinstall connects and the install succeeds.
	env := n.Env(t)
	run(t, t.TempDir(), env, "npm", "install", "--no-package-lock", "standin-contact")
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the postinstall script did not connect to the target")
	}

	// Through a proxy that refuses: the install fails and says why. npm
	// itself reaches the registry directly (NO_PROXY).
	proxy, connects := refusingProxy(t)
	out, err := tryRun(t, t.TempDir(), append(env, "HTTPS_PROXY="+proxy, "NO_PROXY=127.0.0.1"), "npm", "install", "--no-package-lock", "standin-contact")
	if err == nil {
		t.Fatalf("npm install succeeded though the proxy refused the postinstall's CONNECT:\n%s", out)
	}
	if want := "standin-postinstall: " + target.Addr().String() + ": proxy answered 403"; !strings.Contains(out, want) {
		t.Errorf("npm install output lacks %q:\n%s", want, out)
	}
	select {
	case got := <-connects:
		if got != target.Addr().String() {
			t.Errorf("proxy saw CONNECT %q, want %q", got, target.Addr())
		}
	default:
		t.Error("the proxy saw no CONNECT")
	}
	select {
	case <-accepted:
		t.Error("the target was reached although the proxy refused")
	default:
	}
}

// refusingProxy is an HTTP proxy on 127.0.0.1 that answers every CONNECT
// 403 and reports its target.
func refusingProxy(t *testing.T) (string, <-chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	connects := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err == nil && req.Method == http.MethodConnect {
				connects <- req.Host
			}
			c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String(), connects
}

func TestNpmPackageWriteRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../x.js", "/etc/x", "a/../../x", ""} {
		p := NpmPackage{Name: "x", Version: "1.0.0", Files: map[string]string{name: ""}}
		if _, err := p.write(t.TempDir()); err == nil {
			t.Errorf("write accepted the file %q", name)
		}
	}
	files := map[string]string{"index.js": ""}
	if _, err := (NpmPackage{Name: "x", Version: "1.0.0", Files: files}).write(t.TempDir()); err != nil || len(files) != 1 {
		t.Errorf("write: %v; the caller's Files became %v", err, files)
	}
}
