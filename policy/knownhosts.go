package policy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Bounds of a rule's `egress.ssh_known_hosts`.
const (
	maxKnownHostLine  = 8 << 10 // an RSA key of 16384 bits is under 3 KiB
	maxKnownHostLines = 256
)

// knownHostKeyTypes are the key algorithms a pinned host key may use:
// OpenSSH's current ones (no DSA, no certificates).
var knownHostKeyTypes = []string{
	ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSA,
	ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256,
}

// KnownHost is one line of a rule's `egress.ssh_known_hosts`: a host key
// that ssh (git over ssh) trusts for the hosts it names, in OpenSSH's
// known_hosts format.
type KnownHost struct {
	Hosts []SSHHost
	// KeyType is the key's algorithm (ssh-ed25519, ecdsa-sha2-nistp256…);
	// Key its wire form in base64, as written.
	KeyType, Key string
	// Fingerprint is the key's SHA256:… fingerprint, as ssh prints it.
	Fingerprint string
}

// SSHHost is a host a known host line names: a DNS name in lower case or
// an IP address in its usual form, and the port (22 unless written
// `[host]:port`).
type SSHHost struct {
	Host string
	Port int
}

// String is the host as known_hosts writes it: `host` for port 22,
// `[host]:port` otherwise.
func (h SSHHost) String() string {
	if h.Port == 22 {
		return h.Host
	}
	return "[" + h.Host + "]:" + strconv.Itoa(h.Port)
}

// String is the known_hosts line: HOST[,HOST…] KEYTYPE BASE64KEY.
func (k KnownHost) String() string {
	hosts := make([]string, len(k.Hosts))
	for i, h := range k.Hosts {
		hosts[i] = h.String()
	}
	return strings.Join(hosts, ",") + " " + k.KeyType + " " + k.Key
}

// KnownHostsFile is the rule's pinned ssh host keys as an OpenSSH
// known_hosts file (one line each), or nil when it pins none.
func (e *Egress) KnownHostsFile() []byte {
	if e == nil || len(e.SSHKnownHosts) == 0 {
		return nil
	}
	var b bytes.Buffer
	for _, k := range e.SSHKnownHosts {
		b.WriteString(k.String())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ParseKnownHost parses one known_hosts line strictly: exactly
// `HOST[,HOST…] KEYTYPE BASE64KEY`, printable ASCII, no marker
// (@cert-authority, @revoked), no comment, no hashed or wildcard host
// (each host is named in clear), a key type OpenSSH uses today whose key
// decodes to that type, base64 written canonically. It must read as
// golang.org/x/crypto/ssh's ParseKnownHosts reads it.
func ParseKnownHost(line string) (KnownHost, error) {
	if len(line) > maxKnownHostLine {
		return KnownHost{}, fmt.Errorf("line longer than %d bytes", maxKnownHostLine)
	}
	for _, c := range []byte(line) {
		if c < 0x20 || c > 0x7e {
			return KnownHost{}, fmt.Errorf("byte %#02x: a known host line is printable ASCII on one line", c)
		}
	}
	fields := strings.Fields(line)
	switch {
	case len(fields) == 0:
		return KnownHost{}, errors.New("empty line")
	case strings.HasPrefix(fields[0], "#"):
		return KnownHost{}, errors.New("a comment is not a host key")
	case strings.HasPrefix(fields[0], "@"):
		return KnownHost{}, fmt.Errorf("marker %q: only plain host keys can be pinned", trimmed(fields[0]))
	case len(fields) != 3:
		return KnownHost{}, fmt.Errorf("%d fields, want 3: HOST[,HOST...] KEYTYPE BASE64KEY (no comment)", len(fields))
	}
	var k KnownHost
	for _, h := range strings.Split(fields[0], ",") {
		sh, err := ParseSSHHost(h)
		if err != nil {
			return KnownHost{}, err
		}
		if slices.Contains(k.Hosts, sh) {
			return KnownHost{}, fmt.Errorf("host %s named twice", sh)
		}
		k.Hosts = append(k.Hosts, sh)
	}
	pub, err := parseHostKey(fields[1], fields[2])
	if err != nil {
		return KnownHost{}, err
	}
	k.KeyType, k.Key, k.Fingerprint = fields[1], fields[2], ssh.FingerprintSHA256(pub)
	if err := sameAsXCrypto(line, fields[0], pub); err != nil {
		return KnownHost{}, err
	}
	return k, nil
}

// parseHostKey checks the key type and decodes the key, which must be of
// that type and written in canonical base64.
func parseHostKey(keyType, b64 string) (ssh.PublicKey, error) {
	if !slices.Contains(knownHostKeyTypes, keyType) {
		return nil, fmt.Errorf("key type %q is not one of %s", trimmed(keyType), strings.Join(knownHostKeyTypes, ", "))
	}
	blob, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || base64.StdEncoding.EncodeToString(blob) != b64 {
		return nil, errors.New("the key is not in base64")
	}
	pub, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return nil, fmt.Errorf("the %s key does not decode: %v", keyType, err)
	}
	if pub.Type() != keyType || !bytes.Equal(pub.Marshal(), blob) {
		return nil, fmt.Errorf("the key is a %s key, not %s", trimmed(pub.Type()), keyType)
	}
	return pub, nil
}

// sameAsXCrypto checks that x/crypto's reading of line agrees with ours.
func sameAsXCrypto(line, hosts string, pub ssh.PublicKey) error {
	marker, xhosts, xpub, comment, rest, err := ssh.ParseKnownHosts([]byte(line))
	if err != nil || marker != "" || comment != "" || len(rest) != 0 ||
		!slices.Equal(xhosts, strings.Split(hosts, ",")) || !bytes.Equal(xpub.Marshal(), pub.Marshal()) {
		return fmt.Errorf("golang.org/x/crypto/ssh reads this line differently (%v)", err)
	}
	return nil
}

// ParseSSHHost reads `host` (port 22) or `[host]:port`.
func ParseSSHHost(s string) (SSHHost, error) {
	switch {
	case s == "":
		return SSHHost{}, errors.New("empty host")
	case strings.HasPrefix(s, "|"):
		return SSHHost{}, errors.New("hashed host names are not accepted: name the host in clear (the policy is not secret)")
	case strings.ContainsAny(s, "*?!"):
		return SSHHost{}, fmt.Errorf("host %q: patterns (*, ?, !) are not accepted: name each host", trimmed(s))
	}
	host, port := s, 22
	if inner, ok := strings.CutPrefix(s, "["); ok {
		h, p, ok := strings.Cut(inner, "]:")
		if !ok {
			return SSHHost{}, fmt.Errorf("host %q: write [HOST]:PORT", trimmed(s))
		}
		n, err := parsePort(p)
		if err != nil {
			return SSHHost{}, fmt.Errorf("host %q: %w", trimmed(s), err)
		}
		if n == 22 {
			return SSHHost{}, fmt.Errorf("host %q: port 22 is written without brackets: %s", trimmed(s), h)
		}
		host, port = h, n
	}
	canon, err := sshHostName(host)
	if err != nil {
		return SSHHost{}, fmt.Errorf("host %q: %w", trimmed(s), err)
	}
	return SSHHost{Host: canon, Port: port}, nil
}

// sshHostName accepts an IP address written as ssh will look it up (its
// usual form: 127.0.0.1, ::1; no zone) or a DNS name, which it lowers.
func sshHostName(h string) (string, error) {
	if a, err := netip.ParseAddr(h); err == nil {
		switch {
		case a.Zone() != "":
			return "", errors.New("an address with a zone")
		case a.String() != h:
			return "", fmt.Errorf("write the address as %s", a)
		}
		return h, nil
	}
	h = strings.ToLower(h)
	if h == "" || len(h) > 253 || strings.HasSuffix(h, ".") {
		return "", errors.New("not a DNS name (1 to 253 characters, no trailing dot) or an IP address")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", fmt.Errorf("bad DNS label %q (letters, digits and inner hyphens, 1 to 63)", trimmed(l))
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "", errors.New("neither a DNS name nor an IP address in its usual form")
	}
	return h, nil
}

// trimmed shortens s for an error message.
func trimmed(s string) string {
	if len(s) > 64 {
		return s[:61] + "..."
	}
	return s
}

// knownHosts reads a rule's `ssh_known_hosts` lines (at is the list's
// path in the document).
func (b *builder) knownHosts(rule string, lines []string, at []any) []KnownHost {
	if len(lines) > maxKnownHostLines {
		b.failAt(b.at(at...), "rule %q: egress ssh_known_hosts: %d lines, at most %d", rule, len(lines), maxKnownHostLines)
		return nil
	}
	var out []KnownHost
	for j, line := range lines {
		k, err := ParseKnownHost(line)
		if err != nil {
			b.failAt(b.at(append(at, j)...), "rule %q: egress ssh_known_hosts: %v", rule, err)
			continue
		}
		if i := slices.IndexFunc(out, func(o KnownHost) bool { return o.String() == k.String() }); i >= 0 {
			b.failAt(b.at(append(at, j)...), "rule %q: egress ssh_known_hosts: entry %d repeats entry %d", rule, j+1, i+1)
			continue
		}
		out = append(out, k)
	}
	return out
}

// PinsFor is the pinned host keys (ssh_known_hosts lines) that name h.
func (e *Egress) PinsFor(h SSHHost) []KnownHost {
	if e == nil {
		return nil
	}
	var out []KnownHost
	for _, k := range e.SSHKnownHosts {
		if slices.Contains(k.Hosts, h) {
			out = append(out, k)
		}
	}
	return out
}

// ReachesSSH reports whether the egress block lets ssh reach h: any host
// in observe mode; otherwise a name through the allowlist, an address
// through allow_cidrs (as the proxy decides). A nil block reaches nothing.
func (e *Egress) ReachesSSH(h SSHHost) bool {
	switch {
	case e == nil:
		return false
	case e.Mode == EgressObserve:
		return true
	}
	if a, err := netip.ParseAddr(h.Host); err == nil {
		return e.opens(a, h.Port)
	}
	return e.Allows(h.Host, h.Port)
}

// ReachHint says what lets ssh reach h: an allowlist entry for a name, a
// CIDR for an address.
func ReachHint(h SSHHost) string {
	if _, err := netip.ParseAddr(h.Host); err == nil {
		return fmt.Sprintf("add a CIDR holding %s, on port %d or every port, to egress.allow_cidrs", h.Host, h.Port)
	}
	return fmt.Sprintf("add %s:%d to egress.allow", h.Host, h.Port)
}

// PublicKey decodes the pinned key (checked when the policy loaded).
func (k KnownHost) PublicKey() (ssh.PublicKey, error) {
	blob, err := base64.StdEncoding.DecodeString(k.Key)
	if err != nil {
		return nil, fmt.Errorf("pinned key of %s: %w", k.Hosts, err)
	}
	return ssh.ParsePublicKey(blob)
}
