package console

import (
	"encoding/json"
	"net/http"
	"strings"

	"coily.dev/coily/access"
	"coily.dev/coily/refusal"
	"coily.dev/coily/visible"
)

// The JSON API (docs/api.md, "The web console's HTTP API"). Every answer
// is a JSON object with "ok"; a refusal is {"ok": false, "error": {"code",
// "message", "audit_id"}} with the refusal code of package refusal.

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	c.pages(mux)
	c.handle(mux, "GET /api/whoami", access.WebPage, c.apiWhoAmI)
	c.handle(mux, "GET /api/status", access.WebStatus, c.apiStatus)
	c.handle(mux, "GET /api/approvals", access.WebApprovals, c.apiApprovals)
	c.handle(mux, "GET /api/approvals/stream", access.WebWatchApprovals, c.apiApprovalStream)
	c.handle(mux, "POST /api/approvals/{id}/approve", access.WebDecide, c.apiDecide(true))
	c.handle(mux, "POST /api/approvals/{id}/deny", access.WebDecide, c.apiDecide(false))
	c.handle(mux, "POST /api/lockout", access.WebLockout, c.apiLockout)
	c.handle(mux, "POST /api/pause", access.WebPause, c.apiPause)
	c.handle(mux, "POST /api/resume", access.WebResume, c.apiResume)
	c.handle(mux, "POST /api/execs/{request_id}/kill", access.WebKill, c.apiKill)
	c.handle(mux, "GET /api/audit/stream", access.WebAudit, c.apiAuditStream)
	// Everything else under /api/ answers JSON too, to a caller admitted
	// as for a page: another method on a known path, or no such path.
	for _, p := range []string{"/api/whoami", "/api/status", "/api/approvals", "/api/approvals/stream", "/api/approvals/{id}/approve",
		"/api/approvals/{id}/deny", "/api/lockout", "/api/pause", "/api/resume", "/api/execs/{request_id}/kill",
		"/api/audit/stream"} {
		c.handle(mux, p, access.WebPage, func(w http.ResponseWriter, _ *request) {
			writeError(w, http.StatusMethodNotAllowed, refusal.New(refusal.BadRequest, "method not allowed"))
		})
	}
	c.handle(mux, "/api/", access.WebPage, func(w http.ResponseWriter, _ *request) {
		writeError(w, http.StatusNotFound, refusal.New(refusal.BadRequest, "no such API path"))
	})
	return mux
}

func (c *Console) apiWhoAmI(w http.ResponseWriter, r *request) {
	who, err := c.cfg.Server.WebWhoAmI(r.Request)
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

func (c *Console) apiStatus(w http.ResponseWriter, r *request) {
	v, err := c.cfg.Server.WebStatus(r.Request)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	writeJSON(w, struct {
		OK bool `json:"ok"`
		statusView
	}{true, newStatusView(v, c.cfg.Dev, c.cfg.Now())})
}

func (c *Console) apiApprovals(w http.ResponseWriter, r *request) {
	list, err := c.cfg.Server.WebApprovals(r.Request)
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

func (c *Console) apiDecide(approve bool) handler {
	return func(w http.ResponseWriter, r *request) {
		note, err := r.text("note")
		if err == nil {
			var a = r.PathValue("id")
			ap, derr := c.cfg.Server.WebDecide(r.Request, a, approve, note)
			if derr == nil {
				writeJSON(w, map[string]any{"ok": true, "approval": newApprovalView(ap, nil, c.cfg.Now())})
				return
			}
			err = derr
		}
		writeError(w, 0, err)
	}
}

func (c *Console) apiLockout(w http.ResponseWriter, r *request) {
	reason, err := r.text("reason")
	if err == nil {
		resp, lerr := c.cfg.Server.WebLockout(r.Request, reason)
		if lerr == nil {
			writeJSON(w, map[string]any{"ok": true, "lockout": stopOf(resp.GetLockout()), "killed": resp.GetKilled()})
			return
		}
		err = lerr
	}
	writeError(w, 0, err)
}

func (c *Console) apiPause(w http.ResponseWriter, r *request) {
	reason, err := r.text("reason")
	if err == nil {
		resp, perr := c.cfg.Server.WebPause(r.Request, reason)
		if perr == nil {
			writeJSON(w, map[string]any{"ok": true, "pause": stopOf(resp.GetPause()), "running": resp.GetRunning()})
			return
		}
		err = perr
	}
	writeError(w, 0, err)
}

func (c *Console) apiResume(w http.ResponseWriter, r *request) {
	reason, err := r.text("reason")
	if err == nil {
		resp, rerr := c.cfg.Server.WebResume(r.Request, reason)
		if rerr == nil {
			writeJSON(w, map[string]any{"ok": true, "pause": stopOf(resp.GetPause())})
			return
		}
		err = rerr
	}
	writeError(w, 0, err)
}

func (c *Console) apiKill(w http.ResponseWriter, r *request) {
	reason, err := r.text("reason")
	if err == nil {
		id := r.PathValue("request_id")
		running, kerr := c.cfg.Server.WebKill(r.Request, id, reason)
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
