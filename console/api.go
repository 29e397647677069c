package console

import (
	"encoding/json"
	"net/http"
	"strings"

	"coily.dev/coily/refusal"
	"coily.dev/coily/visible"
)

// The JSON API (docs/api.md, "The web console's HTTP API"). Every answer
// is a JSON object with "ok"; a refusal is {"ok": false, "error": {"code",
// "message", "audit_id"}} with the refusal code of package refusal.

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	c.pages(mux)
	mux.HandleFunc("GET /api/whoami", c.apiWhoAmI)
	mux.HandleFunc("GET /api/status", c.apiStatus)
	mux.HandleFunc("GET /api/approvals", c.apiApprovals)
	mux.HandleFunc("GET /api/approvals/stream", c.apiApprovalStream)
	mux.HandleFunc("POST /api/approvals/{id}/approve", c.apiDecide(true))
	mux.HandleFunc("POST /api/approvals/{id}/deny", c.apiDecide(false))
	mux.HandleFunc("POST /api/lockout", c.apiLockout)
	mux.HandleFunc("POST /api/pause", c.apiPause)
	mux.HandleFunc("POST /api/resume", c.apiResume)
	mux.HandleFunc("POST /api/execs/{request_id}/kill", c.apiKill)
	mux.HandleFunc("GET /api/audit/stream", c.apiAuditStream)
	// Everything else under /api/ answers JSON too: another method on a
	// known path, or no such path.
	for _, p := range []string{"/api/whoami", "/api/status", "/api/approvals", "/api/approvals/stream", "/api/approvals/{id}/approve",
		"/api/approvals/{id}/deny", "/api/lockout", "/api/pause", "/api/resume", "/api/execs/{request_id}/kill",
		"/api/audit/stream"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusMethodNotAllowed, refusal.New(refusal.BadRequest, "method not allowed"))
		})
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, refusal.New(refusal.BadRequest, "no such API path"))
	})
	return mux
}

func (c *Console) apiWhoAmI(w http.ResponseWriter, r *http.Request) {
	who, err := c.cfg.Server.WebWhoAmI(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	perms := make([]string, len(who.Permissions))
	for i, p := range who.Permissions {
		perms[i] = string(p)
	}
	writeJSON(w, map[string]any{"ok": true, "dev": c.cfg.Dev, "now": stamp(c.cfg.Now()),
		"caller": callerView{Principal: vt(who.Principal), Peer: vt(who.Peer), Roles: texts(who.Roles), Permissions: texts(perms)}})
}

func (c *Console) apiStatus(w http.ResponseWriter, r *http.Request) {
	v, err := c.cfg.Server.WebStatus(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	writeJSON(w, struct {
		OK bool `json:"ok"`
		statusView
	}{true, newStatusView(v, c.cfg.Dev, c.cfg.Now())})
}

func (c *Console) apiApprovals(w http.ResponseWriter, r *http.Request) {
	list, err := c.cfg.Server.WebApprovals(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	now := c.cfg.Now()
	out := make([]approvalView, 0, len(list))
	for _, p := range list {
		out = append(out, newApprovalView(p.Approval, p.Rule, now))
	}
	writeJSON(w, map[string]any{"ok": true, "now": stamp(now), "approvals": out})
}

func (c *Console) apiDecide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		note, err := parseBody(r, "note")
		if err == nil {
			var a = r.PathValue("id")
			ap, derr := c.cfg.Server.WebDecide(r, a, approve, note)
			if derr == nil {
				writeJSON(w, map[string]any{"ok": true, "approval": newApprovalView(ap, nil, c.cfg.Now())})
				return
			}
			err = derr
		}
		writeError(w, 0, err)
	}
}

func (c *Console) apiLockout(w http.ResponseWriter, r *http.Request) {
	reason, err := parseBody(r, "reason")
	if err == nil {
		resp, lerr := c.cfg.Server.WebLockout(r, reason)
		if lerr == nil {
			writeJSON(w, map[string]any{"ok": true, "lockout": stopOf(resp.GetLockout()), "killed": resp.GetKilled()})
			return
		}
		err = lerr
	}
	writeError(w, 0, err)
}

func (c *Console) apiPause(w http.ResponseWriter, r *http.Request) {
	reason, err := parseBody(r, "reason")
	if err == nil {
		resp, perr := c.cfg.Server.WebPause(r, reason)
		if perr == nil {
			writeJSON(w, map[string]any{"ok": true, "pause": stopOf(resp.GetPause()), "running": resp.GetRunning()})
			return
		}
		err = perr
	}
	writeError(w, 0, err)
}

func (c *Console) apiResume(w http.ResponseWriter, r *http.Request) {
	reason, err := parseBody(r, "reason")
	if err == nil {
		resp, rerr := c.cfg.Server.WebResume(r, reason)
		if rerr == nil {
			writeJSON(w, map[string]any{"ok": true, "pause": stopOf(resp.GetPause())})
			return
		}
		err = rerr
	}
	writeError(w, 0, err)
}

func (c *Console) apiKill(w http.ResponseWriter, r *http.Request) {
	reason, err := parseBody(r, "reason")
	if err == nil {
		id := r.PathValue("request_id")
		running, kerr := c.cfg.Server.WebKill(r, id, reason)
		if kerr == nil {
			writeJSON(w, map[string]any{"ok": true, "request_id": vt(id), "running": running})
			return
		}
		err = kerr
	}
	writeError(w, 0, err)
}

// httpStatus is the HTTP status of a refusal code.
func httpStatus(code refusal.Code) int {
	switch code {
	case refusal.Unauthenticated:
		return http.StatusUnauthorized
	case refusal.PermissionDenied:
		return http.StatusForbidden
	case refusal.BadRequest:
		return http.StatusBadRequest
	case refusal.RateLimit:
		return http.StatusTooManyRequests
	case refusal.Internal:
		return http.StatusInternalServerError
	}
	return http.StatusConflict // the state refuses it: lockout, pause, …
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	AuditID string `json:"audit_id,omitempty"`
}

// writeError answers a refusal: status (0: the code's), the code, its
// caller-safe message made visible, and its audit record's id.
func writeError(w http.ResponseWriter, status int, err error) {
	re := refusal.As(err)
	if status == 0 {
		status = httpStatus(re.Code)
	}
	body := errorBody{Code: string(re.Code), Message: visible.Text(re.Msg), AuditID: re.AuditID}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": body})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// isAPI reports whether a path is the API's (JSON) rather than a page's.
func isAPI(path string) bool { return strings.HasPrefix(path, "/api/") }
