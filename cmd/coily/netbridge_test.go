package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Inside the bridge, every proxy variable in both spellings names the
// bridge's own listener, whatever the command's environment said: a rule's
// env or the caller cannot point a tool around the proxy.
func TestBridgeEnv(t *testing.T) {
	ap := netip.MustParseAddrPort("127.0.0.1:41234")
	base := []string{"PATH=/usr/bin", "https_proxy=http://evil.test:1", "ALL_PROXY=socks5://evil.test:1",
		"NO_PROXY=*", "no_proxy=*", "all_proxy=socks5h://evil.test:9"}
	env := bridgeEnv(base, ap, []string{"GIT_SSH_COMMAND=x"})
	want := map[string]string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		want[k] = "http://127.0.0.1:41234"
	}
	want["NO_PROXY"], want["no_proxy"] = "localhost,127.0.0.1", "localhost,127.0.0.1"
	seen := map[string]int{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		seen[k]++
		if w, ok := want[k]; ok && v != w {
			t.Errorf("%s=%q, want %q", k, v, w)
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s set %d times, want once", k, seen[k])
		}
	}
	if !slices.Contains(env, "PATH=/usr/bin") || !slices.Contains(env, "GIT_SSH_COMMAND=x") {
		t.Errorf("env lost the command's own variables: %q", env)
	}
}
