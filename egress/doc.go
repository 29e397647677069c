// Package egress owns the server side of a sandbox's network in proxied
// mode: an HTTP proxy (CONNECT tunnels and absolute-URI plain HTTP) served
// on the unix socket that the sandbox's netbridge forwards to, the
// allowlist it enforces, the classification of destination addresses, and
// the per-(host, port, decision) rows that record where a command went.
//
// Invariants:
//   - A destination is reached only if its host:port matches the
//     Allowlist (or the mode is observe, which records the would-be
//     denial) and the address dialed is public or inside an explicit
//     AllowCIDRs prefix. The address classes are enforced in every mode.
//   - A host name is resolved exactly once per request, and the proxy
//     dials exactly an address that passed classification; it never hands
//     a name to the dialer.
//   - TLS is intercepted only for the hosts of Config.Inspect's CA (a rule's
//     egress.inspect): there the proxy terminates TLS with a leaf of the
//     exec's own CA, checks each request (Host, framing, http rules, body
//     cap), swaps credential placeholders only where an Injection says and
//     refuses them anywhere else, and sends the request over its own TLS
//     connection to the checked address, verified against Roots. Every
//     other CONNECT tunnel carries bytes unchanged. But a tunnel whose ClientHello names another server than the CONNECT
//     host, or whose ClientHello cannot be parsed, is closed before one of
//     its bytes goes upstream (see sniff).
//   - Every request, allowed or refused, lands in a Row; every denial is
//     answered with a status and a sentence an agent can act on.
//   - Close stops every listener and tunnel and returns only when every
//     goroutine the Proxy started has ended.
//
// The package is a library: wiring it to rules and to the audit record is
// the server's job (issue 14).
package egress
