package devnet

import "net/http"

// controlRoutes passes to the test control server only the paths a
// tailscale node asks it for: the server's key, the noise upgrade every
// other request goes through, and the connectivity check. Tailscale's
// testcontrol panics the whole process, from a goroutine of its own where
// no recover reaches, on any path it does not handle (one `curl` of /),
// so every other path is a 404 here, before it gets there.
func controlRoutes(control http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/key", "/ts2021", "/generate_204":
			control.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
