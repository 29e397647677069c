package keystore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/vault/api"
)

// vaultError is a classified failure of a Vault request.
type vaultError struct {
	kind error // ErrNotFound, ErrDenied, ErrUnreachable
	msg  string
	resp *api.ResponseError // when Vault answered
}

func (e *vaultError) Error() string { return e.kind.Error() + ": " + e.msg }
func (e *vaultError) Unwrap() error { return e.kind }

// classify turns a failed request (what) into a short error wrapping one
// sentinel: 403/401 denied, 404/400/405 not found, 5xx/429/412 (sealed,
// standby, rate limited) and transport failures unreachable. It never
// includes a response body beyond Vault's error strings, with token
// scrubbed from them.
func (v *Vault) classify(ctx context.Context, what string, err error, token string) error {
	var re *api.ResponseError
	if errors.As(err, &re) {
		detail := ""
		if !re.RawError {
			var msgs []string
			for _, m := range re.Errors {
				for _, l := range strings.Split(m, "\n") {
					// Vault's multierror lines: "2 errors occurred:", "\t* permission denied".
					l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
					if l == "" || l == "permission denied" || strings.HasSuffix(l, " occurred:") {
						continue
					}
					msgs = append(msgs, l)
				}
			}
			if len(msgs) > 0 {
				detail = ": " + oneLine(strings.Join(msgs, "; "), 160)
			}
			if token != "" {
				detail = strings.ReplaceAll(detail, token, "<token>")
			}
		}
		e := &vaultError{resp: re, msg: fmt.Sprintf("vault refused the %s (%d%s)", what, re.StatusCode, detail)}
		switch {
		case re.StatusCode == 401 || re.StatusCode == 403:
			e.kind = ErrDenied
		case re.StatusCode == 404 || re.StatusCode == 400 || re.StatusCode == 405:
			e.kind = ErrNotFound
		default:
			e.kind = ErrUnreachable
			e.msg = fmt.Sprintf("vault at %s failed the %s (%d%s)", v.addr(), what, re.StatusCode, detail)
			if re.StatusCode == 503 && detail == "" {
				e.msg += ", sealed or in standby?"
			}
		}
		return e
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return &vaultError{kind: ErrUnreachable, msg: fmt.Sprintf("no answer from vault at %s to the %s in time", v.addr(), what)}
	}
	return &vaultError{kind: ErrUnreachable, msg: fmt.Sprintf("vault at %s: %s", v.addr(), v.short(err, token))}
}

// short is err's message without the request URL, on one line, with token
// scrubbed.
func (v *Vault) short(err error, token string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var re *api.ResponseError
	msg := err.Error()
	if errors.As(err, &re) {
		msg = fmt.Sprintf("%d: %s", re.StatusCode, strings.Join(re.Errors, "; "))
		if re.RawError {
			msg = fmt.Sprintf("HTTP %d", re.StatusCode)
		}
	}
	if token != "" {
		msg = strings.ReplaceAll(msg, token, "<token>")
	}
	return oneLine(msg, 200)
}

func (v *Vault) addr() string {
	u, err := url.Parse(v.base.Address())
	if err != nil {
		return "(invalid address)"
	}
	return u.Redacted()
}

// scrub replaces secret in err's message (a login error must not echo the
// secret id).
func scrub(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	var re *api.ResponseError
	if errors.As(err, &re) {
		c := *re
		c.Errors = nil
		for _, e := range re.Errors {
			c.Errors = append(c.Errors, strings.ReplaceAll(e, secret, "<secret id>"))
		}
		c.URL = strings.ReplaceAll(c.URL, secret, "<secret id>")
		return &c
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "<secret id>"))
}

func mentions(re *api.ResponseError, s string) bool {
	for _, e := range re.Errors {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// oneLine collapses whitespace and cuts s to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
