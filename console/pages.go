package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"

	"coily.dev/coily/access"
	"coily.dev/coily/refusal"
)

// static holds the pages and their files: plain HTML, CSS and JavaScript,
// no build step.
//
//go:embed static
var static embed.FS

// pages registers the pages and their files, each served to a caller
// admitted as for a page (any caller holding a permission; the API
// decides the rest).
func (c *Console) pages(mux *http.ServeMux) {
	c.handle(mux, "GET /{$}", access.WebPage, page("index.html"))
	c.handle(mux, "GET /approvals/{id}", access.WebPage, page("approval.html"))
	c.handle(mux, "GET /audit", access.WebPage, page("audit.html"))
	c.handle(mux, "GET /static/{name}", access.WebPage, func(w http.ResponseWriter, r *request) {
		page(path.Base(r.PathValue("name")))(w, r)
	})
	c.handle(mux, "/", access.WebPage, func(w http.ResponseWriter, _ *request) {
		pageError(w, refusal.New(refusal.BadRequest, "no such page"))
	})
}

// page serves one embedded file.
func page(name string) handler {
	return func(w http.ResponseWriter, _ *request) {
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
