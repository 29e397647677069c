package console

import (
	"net/http"
	"path"
	"strings"

	"coily.dev/coily/httpserve"
)

// contentSecurityPolicy allows the console's own script and style files
// and nothing else: no inline script or style, no other origin, no
// plugin, no framing by anyone, no form posting anywhere (the pages post
// with fetch), and Trusted Types so that no string can become markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// guard wraps every response in the console's security headers and
// refuses, before any route, a request for another host (DNS rebinding:
// a page of another site whose name was pointed at this node's address)
// and a state-changing request from another origin (CSRF). Each refusal
// is audited by the server (WebRefuse). API reads from another site are
// refused too (fetch metadata): a page of another origin has no business
// loading them, even where the browser would not let it read them.
//
// It also withholds every request's body until the request is admitted
// for its route's action (admit.go).
func (c *Console) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		r = withhold(r)
		switch {
		case !c.hosts[normalHost(r.Host)]:
			c.refuseGuard(w, r, http.StatusMisdirectedRequest, "this console does not answer to that host name")
			return
		case cop.Check(r) != nil:
			c.refuseGuard(w, r, http.StatusForbidden, "cross-origin request refused")
			return
		case strings.HasPrefix(r.URL.Path, "/api/") && crossSite(r):
			c.refuseGuard(w, r, http.StatusForbidden, "cross-site read of the API refused")
			return
		case !cleanPath(r.URL.Path):
			// The mux would answer a redirect itself, before any route
			// admits the caller (and after reading its body).
			c.refuseGuard(w, r, http.StatusBadRequest, "request path is not clean")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath reports whether p is a path the mux routes as it is: rooted,
// and unchanged by path.Clean (but for a trailing slash).
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || c+"/" == p
}

// crossSite reports whether a browser says the request comes from a page
// of another origin (Sec-Fetch-Site); requests without the header (not
// browsers, or old ones) are judged by CrossOriginProtection alone.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return false
	}
	return true
}

// refuseGuard audits and answers a refusal of the guard, reading nothing
// more of the connection.
func (c *Console) refuseGuard(w http.ResponseWriter, r *http.Request, status int, msg string) {
	err := c.cfg.Server.WebRefuse(r, msg)
	httpserve.HangUp(w)
	answerError(w, r, status, err)
}

// securityHeaders sets the headers every response carries.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	h.Set("Cache-Control", "no-store")
}
