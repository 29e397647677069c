package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"

	"coily.dev/coily/refusal"
	"coily.dev/coily/server"
)

// static holds the pages and their files: plain HTML, CSS and JavaScript,
// no build step.
//
//go:embed static
var static embed.FS

// pages registers the pages and their files: each request is admitted
// (any caller holding a permission; the API decides the rest).
func (c *Console) pages(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", c.page("index.html"))
	mux.HandleFunc("GET /approvals/{id}", c.page("approval.html"))
	mux.HandleFunc("GET /audit", c.page("audit.html"))
	mux.HandleFunc("GET /static/{name}", func(w http.ResponseWriter, r *http.Request) {
		c.page(path.Base(r.PathValue("name")))(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if err := c.cfg.Server.WebAdmit(r, server.WebPage); err != nil {
			pageError(w, err)
			return
		}
		pageError(w, refusal.New(refusal.BadRequest, "no such page"))
	})
}

// page serves one embedded file to an admitted caller.
func (c *Console) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := c.cfg.Server.WebAdmit(r, server.WebPage); err != nil {
			pageError(w, err)
			return
		}
		data, err := fs.ReadFile(static, "static/"+name)
		if err != nil {
			pageError(w, refusal.New(refusal.BadRequest, "no such file"))
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(data)
	}
}

// pageError answers a page request's refusal as plain text.
func pageError(w http.ResponseWriter, err error) {
	status := httpStatus(refusal.As(err).Code)
	if status == http.StatusBadRequest {
		status = http.StatusNotFound
	}
	pageErrorStatus(w, status, err)
}

// pageErrorStatus answers a page request's refusal as plain text, with
// the given status.
func pageErrorStatus(w http.ResponseWriter, status int, err error) {
	re := refusal.As(err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	msg := "coily console: refused (" + string(re.Code) + "): " + vt(re.Msg) + "\n"
	if re.AuditID != "" {
		msg += "audit record " + re.AuditID + "\n"
	}
	_, _ = w.Write([]byte(msg))
}
