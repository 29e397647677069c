package devnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"tailscale.com/ipn"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
)

// DefineService does on the dev net what a tailnet's admin does for a
// Tailscale Service: it gives the Service name the virtual IP vip, lets
// each of hosts serve it (their service-host capability, the VIP routed
// to them), names it in DNS (name.coily-dev.ts.net), and has each of
// clients accept the route. It returns once every node's map holds it.
// Hosts must be tagged nodes already.
func (n *Net) DefineService(ctx context.Context, name string, vip netip.Addr, hosts, clients []*tsnet.Server) error {
	svc := tailcfg.ServiceName(name)
	if err := svc.Validate(); err != nil {
		return fmt.Errorf("devnet: %w", err)
	}
	for _, h := range hosts {
		if err := n.hostService(ctx, h, svc, vip); err != nil {
			return err
		}
	}
	for _, c := range clients {
		lc, err := c.LocalClient()
		if err != nil {
			return err
		}
		if _, err := lc.EditPrefs(ctx, &ipn.MaskedPrefs{RouteAllSet: true, Prefs: ipn.Prefs{RouteAll: true}}); err != nil {
			return fmt.Errorf("devnet: accept routes: %w", err)
		}
	}
	n.Control.AddDNSRecords(tailcfg.DNSRecord{Name: svc.WithoutPrefix() + "." + MagicDNSDomain, Value: vip.String()})
	for _, s := range append(slices.Clone(hosts), clients...) {
		if err := waitDNSRecord(ctx, s, vip.String()); err != nil {
			return err
		}
	}
	return nil
}

func (n *Net) hostService(ctx context.Context, h *tsnet.Server, svc tailcfg.ServiceName, vip netip.Addr) error {
	lc, err := h.LocalClient()
	if err != nil {
		return err
	}
	st, err := lc.StatusWithoutPeers(ctx)
	if err != nil {
		return fmt.Errorf("devnet: status: %w", err)
	}
	mappings := tailcfg.ServiceIPMappings{}
	if prev, err := tailcfg.UnmarshalNodeCapJSON[tailcfg.ServiceIPMappings](st.Self.CapMap, tailcfg.NodeAttrServiceHost); err == nil && len(prev) == 1 {
		mappings = prev[0]
	}
	mappings[svc] = []netip.Addr{vip}
	raw, err := json.Marshal(mappings)
	if err != nil {
		return err
	}
	cm := tailcfg.NodeCapMap{}
	for k, v := range st.Self.CapMap {
		cm[k] = v
	}
	cm[tailcfg.NodeAttrServiceHost] = []tailcfg.RawMessage{tailcfg.RawMessage(raw)}
	n.Control.SetNodeCapMap(st.Self.PublicKey, cm)
	routes := []netip.Prefix{netip.PrefixFrom(vip, vip.BitLen())}
	for k := range mappings {
		for _, ip := range mappings[k] {
			if p := netip.PrefixFrom(ip, ip.BitLen()); !slices.Contains(routes, p) {
				routes = append(routes, p)
			}
		}
	}
	n.Control.SetSubnetRoutes(st.Self.PublicKey, routes)
	return nil
}

// waitDNSRecord waits until s's map holds a DNS record with value (the
// last change DefineService makes).
func waitDNSRecord(ctx context.Context, s *tsnet.Server, value string) error {
	lc, err := s.LocalClient()
	if err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if d, err := lc.DNSConfig(ctx); err == nil && d != nil &&
			slices.ContainsFunc(d.ExtraRecords, func(r tailcfg.DNSRecord) bool { return r.Value == value }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devnet: DNS record %s not in %s's map: %w", value, s.Hostname, ctx.Err())
		case <-tick.C:
		}
	}
}
