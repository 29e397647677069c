package sandbox

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// hostileProxyAddrs are refused as Profile.ProxyAddr: the profile would
// open the sandbox to something else than the proxy's loopback port, or
// write text of the caller's into it.
var hostileProxyAddrs = []string{
	"",
	"0.0.0.0:8080",
	"[::]:8080",
	"8.8.8.8:443",
	"192.168.1.10:3128",
	"10.0.0.1:3128",
	"169.254.169.254:80",
	"127.0.0.2:8080",
	"127.1:8080",
	"[::ffff:127.0.0.1]:8080",
	"[::1%lo0]:8080",
	"[0:0:0:0:0:0:0:1]:8080",
	"localhost:8080",
	"proxy.example.com:3128",
	"127.0.0.1",
	"[::1]",
	"::1:8080",
	"127.0.0.1:0",
	"[::1]:0",
	"127.0.0.1:65536",
	"127.0.0.1:99999",
	"127.0.0.1:-1",
	"127.0.0.1:+80",
	"127.0.0.1:080",
	"127.0.0.1:0x50",
	"127.0.0.1:*",
	"127.0.0.1:",
	":8080",
	" 127.0.0.1:8080",
	"127.0.0.1:8080 ",
	"http://127.0.0.1:8080",
	"127.0.0.1:8080/",
	"127.0.0.1:8080\n(allow default)",
	"127.0.0.1:8080\x00",
	`127.0.0.1:8080")) (allow network*) (allow default) ("`,
	`127.0.0.1:8080) (allow network-outbound (remote ip "*:*")`,
	`localhost:*`,
}

func TestParseProxyAddr(t *testing.T) {
	for _, s := range []string{"127.0.0.1:1", "127.0.0.1:3128", "127.0.0.1:65535", "[::1]:8080"} {
		ap, err := ParseProxyAddr(s)
		if err != nil || ap.String() != s {
			t.Errorf("ParseProxyAddr(%q) = %v, %v", s, ap, err)
		}
	}
	for _, s := range hostileProxyAddrs {
		if ap, err := ParseProxyAddr(s); err == nil {
			t.Errorf("ParseProxyAddr(%q) accepted: %v", s, ap)
		}
	}
}

// Every hostile address is refused by Validate and by the profile
// builder, and none reaches a profile or an environment.
func TestSandboxExecRejectsProxyAddr(t *testing.T) {
	for _, s := range hostileProxyAddrs {
		p := Profile{Dir: "/Users/dev/ws", Home: "/Users/dev/h", Network: NetworkProxied, ProxyAddr: s}
		if got, err := SandboxExecProfile(p); err == nil {
			t.Errorf("ProxyAddr %q: profile accepted:\n%s", s, got)
		}
		if env, err := sandboxExecEnv(p); err == nil {
			t.Errorf("ProxyAddr %q: environment accepted: %q", s, env)
		}
		if s == "" {
			continue
		}
		p.Network, p.ProxySocket = NetworkDeny, "/Users/dev/proxy.sock"
		if err := p.Validate(); err == nil {
			t.Errorf("ProxyAddr %q: Validate accepted it (outside proxied mode too)", s)
		}
	}
}

func TestSandboxExecEnv(t *testing.T) {
	env := []string{"HOME=/h", "HTTP_PROXY=http://evil.test:1", "https_proxy=http://evil.test:2",
		"NO_PROXY=*", "all_proxy=socks5://evil.test:3", "PATH=/usr/bin", "HTTP_PROXYX=kept"}
	p := Profile{Env: env, Network: NetworkProxied, ProxyAddr: "127.0.0.1:54321"}
	got, err := sandboxExecEnv(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"HOME=/h", "PATH=/usr/bin", "HTTP_PROXYX=kept",
		"HTTP_PROXY=http://127.0.0.1:54321", "HTTPS_PROXY=http://127.0.0.1:54321", "ALL_PROXY=http://127.0.0.1:54321",
		"http_proxy=http://127.0.0.1:54321", "https_proxy=http://127.0.0.1:54321", "all_proxy=http://127.0.0.1:54321",
		"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1"}
	if !slices.Equal(got, want) {
		t.Errorf("proxied environment:\n%q\nwant\n%q", got, want)
	}
	if !slices.Equal(env[:2], []string{"HOME=/h", "HTTP_PROXY=http://evil.test:1"}) {
		t.Errorf("the profile's own Env was modified: %q", env)
	}
	p.ProxyAddr = "[::1]:3128"
	got, _ = sandboxExecEnv(p)
	if !slices.Contains(got, "HTTPS_PROXY=http://[::1]:3128") {
		t.Errorf("IPv6 proxy: %q", got)
	}
	for _, n := range []Network{NetworkDeny, NetworkLoopback, NetworkOpen} {
		p := Profile{Env: env, Network: n}
		if got, err := sandboxExecEnv(p); err != nil || !slices.Equal(got, env) {
			t.Errorf("%s: environment %q, %v; want it unchanged", n, got, err)
		}
	}
	for _, kv := range ProxyEnv(mustProxyAddr(t, "127.0.0.1:1")) {
		if strings.ContainsAny(kv, " \n") {
			t.Errorf("ProxyEnv entry %q", kv)
		}
	}
}

func TestDefaultProfileCarriesProxyAddr(t *testing.T) {
	p := DefaultProfile(ProfileInput{Home: "/h", Dir: "/h", Network: NetworkProxied, Binds: []Bind{{At: ProxyAddrBind, Path: "127.0.0.1:3128"}}})
	if p.ProxyAddr != "127.0.0.1:3128" {
		t.Fatalf("ProxyAddr = %q", p.ProxyAddr)
	}
}

func mustProxyAddr(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := ParseProxyAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
