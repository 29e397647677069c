package gitproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"coily.dev/coily/refusal"
)

// A push of one ref to an https upstream goes upstream as the agent sent
// it: the proxy's own command (the update, its old value the one the
// proxy checked against the cache's refresh) and the pack the agent's git
// made, byte for byte, which the proxy's git has received, checked (fsck,
// connectivity) and classified, in one receive-pack POST. That is what
// git push would send, without a git to make the pack again, and without
// the advertisement before it: the command's old value is the lease, as
// receive-pack updates a ref only from that value. The pack is thin
// against the refs the proxy advertised, which are upstream's; a base
// upstream has lost since is upstream's to refuse. It goes only when it
// holds exactly what the update needs (packsent.go). A push of several
// refs, or over ssh, goes by git push (pushUpstream).

// forwardable reports whether ps goes upstream by forward.
func (ps *push) forwardable(up *upstream) bool {
	return up.ssh == nil && up.tls != nil && len(ps.updates) == 1 && ps.pack != ""
}

// forward sends the push's one update and the agent's pack upstream, and
// reads upstream's report.
func (p *Proxy) forward(ctx context.Context, ps *push, up *upstream, n int64) error {
	u := ps.updates[0]
	body, size, err := forwardBody(u, ps.pack, n)
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "the proxy could not read the push's pack")
	}
	defer body.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.UpstreamTimeout)
	defer cancel()
	var rep *report
	err = up.post(ctx, "git-receive-pack", body, size, "", func(r io.Reader) (err error) {
		rep, err = readReport(r)
		return err
	})
	if err != nil {
		ps.answer = "upstream refused: " + oneLine(err.Error())
		return refusal.Wrap(refusal.PolicyDeny, err, "%s", ps.answer)
	}
	if ps.answer = rep.answer(u); ps.answer != "" {
		return refusal.New(refusal.PolicyDeny, "%s", ps.answer)
	}
	ps.answer = "upstream accepted 1 ref update(s)"
	return nil
}

// answer is why upstream did not update u's ref, or "" when it did.
func (rep *report) answer(u *update) string {
	said := ""
	if rep.said != "" {
		said = ": " + rep.said
	}
	why, reported := rep.refs[u.ref]
	switch {
	case rep.unpack != "ok":
		return "upstream refused: unpack " + oneLine(rep.unpack) + said
	case !reported || len(rep.refs) != 1:
		return "upstream refused: its report does not name " + u.ref + " alone" + said
	case why == "":
		return ""
	case strings.Contains(why, "stale") || why == "failed to update ref" || why == "failed to lock":
		// receive-pack updates the ref only from the command's old
		// value: another push got there since the cache's refresh.
		return "upstream refused: the push's old value is not upstream's current value; fetch and try again (" +
			u.ref + ": " + oneLine(why) + said + ")"
	}
	return "upstream refused: " + u.ref + " (" + oneLine(why) + ")" + said
}

// forwardBody is the POST's body: the command, with the capabilities the
// proxy reads the answer by, a flush, and the first n bytes of the
// agent's pack (none for a delete).
func forwardBody(u *update, pack string, n int64) (io.ReadCloser, int64, error) {
	caps := "report-status side-band-64k quiet"
	if len(u.old) == 64 {
		caps += " object-format=sha256"
	}
	line := u.old + " " + u.new + " " + u.ref + "\x00" + caps + " agent=git/coily\n"
	head := pkt(line) + "0000"
	f, err := os.Open(pack)
	if err != nil {
		return nil, 0, err
	}
	if zero(u.new) {
		n = 0
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader(head), io.LimitReader(f, n)), f}, int64(len(head)) + n, nil
}

// post sends body (size bytes) to upstream's smart HTTP service
// (git-receive-pack, git-upload-pack) with the remote's credential, by
// client, and hands read the answer when it is HTTP 200 of the service's
// result type; gitProtocol, when set, is the Git-Protocol header. ctx
// bounds it all.
func (u *upstream) post(ctx context.Context, service string, body io.Reader, size int64, gitProtocol string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(u.url, "/")+"/"+service, body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/x-"+service+"-request")
	req.Header.Set("Accept", "application/x-"+service+"-result")
	req.Header.Set("User-Agent", "git/coily")
	if gitProtocol != "" {
		req.Header.Set("Git-Protocol", gitProtocol)
	}
	if u.auth != "" {
		req.Header.Set("Authorization", u.auth)
	}
	client := u.client()
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/x-"+service+"-result" {
		return fmt.Errorf("HTTP %d (%s)", resp.StatusCode, oneLine(ct))
	}
	return read(resp.Body)
}

// client is an HTTP client that reaches exactly the upstream's pinned
// address, over TLS for its host name (its remote's CA file, or the
// system's roots), without a proxy, and follows no redirect.
func (u *upstream) client() *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", u.addr)
			},
			TLSClientConfig:        u.tls,
			TLSHandshakeTimeout:    30 * time.Second,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// tlsConfig is the TLS of an https upstream at host: its CA file's roots
// when it names one, the system's otherwise.
func tlsConfig(host, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + caFile)
	}
	return cfg, nil
}
