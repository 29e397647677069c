package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"tailscale.com/tsnet"
)

// NodeListener is where a console listens on a tsnet node.
type NodeListener struct {
	net.Listener
	// Hosts are the names the console answers to on the node: its short
	// name, its MagicDNS name and its tailnet addresses.
	Hosts []string
	// URL is the console's address for a browser on the tailnet.
	URL string
	// TLS is true when it serves HTTPS with the node's certificate.
	TLS bool
	// Redirect, with TLS, is the node's port 80: it sends browsers to the
	// HTTPS URL (Redirector).
	Redirect net.Listener
}

// Close closes both listeners.
func (l *NodeListener) Close() error {
	var errs []error
	if l.Listener != nil {
		errs = append(errs, l.Listener.Close())
	}
	if l.Redirect != nil {
		errs = append(errs, l.Redirect.Close())
	}
	return errors.Join(errs...)
}

// ListenNode opens the console's listener on a tsnet node: HTTPS on :443
// with the node's Tailscale certificate when the tailnet offers
// certificates (MagicDNS and HTTPS enabled in its DNS settings) and
// httpOnly is not set, else HTTP on :80, over WireGuard, which still
// encrypts and authenticates every packet (the browser calls the page
// "not secure" all the same). Which of the two it chose is logged.
//
// httpOnly is for tailnets that name certificate domains but cannot
// issue certificates (coily dev's, whose control has no ACME behind it),
// and for owners who would rather not have the node's name published in
// Certificate Transparency logs, as every certificate's is.
func ListenNode(ctx context.Context, node *tsnet.Server, log *slog.Logger, httpOnly bool) (*NodeListener, error) {
	lc, err := node.LocalClient()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	st, err := lc.StatusWithoutPeers(ctx)
	if err != nil || st.Self == nil {
		return nil, fmt.Errorf("console: node status: %w", err)
	}
	fqdn := strings.TrimSuffix(st.Self.DNSName, ".")
	hosts := []string{}
	for _, h := range []string{node.Hostname, st.Self.HostName, fqdn, strings.Split(fqdn, ".")[0]} {
		if h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	for _, ip := range st.TailscaleIPs {
		hosts = append(hosts, ip.String())
	}
	nl := &NodeListener{Hosts: hosts}
	if len(node.CertDomains()) > 0 && !httpOnly {
		ln, err := node.ListenTLS("tcp", ":443")
		if err == nil {
			nl.Listener, nl.TLS, nl.URL = ln, true, "https://"+node.CertDomains()[0]+"/"
			if nl.Redirect, err = node.Listen("tcp", ":80"); err != nil {
				nl.Close()
				return nil, fmt.Errorf("console: listen on :80: %w", err)
			}
			log.Info("web console: HTTPS with the node's Tailscale certificate", "url", nl.URL)
			return nl, nil
		}
		log.Warn("web console: the tailnet offers certificates but HTTPS could not start; serving HTTP", "err", err)
	}
	ln, err := node.Listen("tcp", ":80")
	if err != nil {
		return nil, fmt.Errorf("console: listen on :80: %w", err)
	}
	name := fqdn
	if name == "" {
		name = node.Hostname
	}
	nl.Listener, nl.URL = ln, "http://"+name+"/"
	why := "the tailnet offers no certificates: enable MagicDNS and HTTPS to serve HTTPS"
	if httpOnly {
		why = "HTTP asked for"
	}
	log.Warn("web console: HTTP on port 80 ("+why+"); WireGuard encrypts and authenticates the link", "url", nl.URL)
	return nl, nil
}

// Redirector sends a browser that asked for http:// one of hosts to the
// same path at url (the HTTPS console); any other host is refused.
func Redirector(url string, hosts []string) http.Handler {
	known := map[string]bool{}
	for _, h := range hosts {
		known[normalHost(h)] = true
	}
	base := strings.TrimSuffix(url, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if !known[normalHost(r.Host)] {
			http.Error(w, "this console does not answer to that host name", http.StatusMisdirectedRequest)
			return
		}
		http.Redirect(w, r, base+r.URL.EscapedPath(), http.StatusMovedPermanently)
	})
}

// ServeRedirect serves Redirector on l until Close (with the console's
// other servers), under the console's limits.
func (c *Console) ServeRedirect(l net.Listener, url string) error {
	return c.serve(Redirector(url, c.cfg.Hosts), l)
}
