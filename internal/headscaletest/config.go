package headscaletest

import (
	"fmt"
	"path/filepath"
)

// config is one headscale configuration: everything on 127.0.0.1, state
// in Dir.
type config struct {
	Dir                         string
	Listen, GRPC, Metrics, STUN int
	Cert, Key                   string
	Policy                      string // "" for none
	IPv6                        bool   // give nodes IPv6 addresses too
	LowLatency                  bool   // add LowLatencyTuning
}

// MagicDNSDomain is the tailnet's DNS suffix: a node is <name>.<domain>.
const MagicDNSDomain = "hs.coily.test"

// yaml renders the configuration file. The settings that matter:
//   - server_url is HTTPS with a self-signed certificate: the embedded DERP
//     relay is served on the same listener, and nodes reach DERP over TLS
//     only;
//   - the embedded DERP (region 999) is the only relay, no public DERP map
//     is fetched, STUN listens on loopback;
//   - prefixes.v6 is left out when the host has no IPv6;
//   - no update checks, no log upload, MagicDNS under MagicDNSDomain
//     without overriding the host's resolver.
func (c config) yaml() string {
	tuning := ""
	if c.LowLatency {
		tuning = LowLatencyTuning
	}
	v6 := ""
	if c.IPv6 {
		v6 = "\n  v6: fd7a:115c:a1e0::/48"
	}
	policy := ""
	if c.Policy != "" {
		policy = fmt.Sprintf("\n  path: %q", c.Policy)
	}
	return fmt.Sprintf(`server_url: https://127.0.0.1:%[2]d
listen_addr: 127.0.0.1:%[2]d
metrics_listen_addr: 127.0.0.1:%[4]d
grpc_listen_addr: 127.0.0.1:%[3]d
grpc_allow_insecure: false
tls_cert_path: %[6]q
tls_key_path: %[7]q
noise:
  private_key_path: %[1]q
prefixes:
  v4: 100.64.0.0/10%[8]s
  allocation: sequential
derp:
  server:
    enabled: true
    region_id: 999
    region_code: headscale
    region_name: Headscale Embedded DERP
    verify_clients: true
    stun_listen_addr: 127.0.0.1:%[5]d
    private_key_path: %[10]q
    automatically_add_embedded_derp_region: true
    ipv4: 127.0.0.1
    ipv6: none
  urls: []
  paths: []
  auto_update_enabled: false
disable_check_updates: true
node:
  expiry: 0
  ephemeral:
    inactivity_timeout: 120s
database:
  type: sqlite
  sqlite:
    path: %[11]q
    write_ahead_log: true
log:
  level: info
  format: text
policy:
  mode: file%[9]s
dns:
  magic_dns: true
  base_domain: %[12]s
  override_local_dns: false
  nameservers:
    global: []
unix_socket: %[13]q
unix_socket_permission: "0770"
logtail:
  enabled: false
taildrop:
  enabled: false
%[14]s`, filepath.Join(c.Dir, "noise.key"), c.Listen, c.GRPC, c.Metrics, c.STUN, c.Cert, c.Key, v6, policy,
		filepath.Join(c.Dir, "derp.key"), filepath.Join(c.Dir, "db.sqlite"), MagicDNSDomain, filepath.Join(c.Dir, "hs.sock"), tuning)
}
