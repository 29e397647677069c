package standin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// PythonHint says how to install a Python with pip.
const PythonHint = "install the Debian packages python3 and python3-pip (scripts/test.sh does)"

// PipOptions configures PipIndex.
type PipOptions struct {
	// Wheels are the wheels the index serves; empty means one,
	// DefaultWheel.
	Wheels []Wheel
	// Hosts are more names for the server's certificate.
	Hosts []string
	// Password, when set, is the Basic auth password (any user name)
	// every request needs: without it the answer is 401 with a Basic
	// challenge, as a private index answers.
	Password string
}

// DefaultWheel is the wheel PipIndex serves when given none: import
// standin_pkg; standin_pkg.NAME == "standin-pkg".
var DefaultWheel = Wheel{Name: "standin-pkg", Version: "1.0"}

// Pip is a PEP 503 simple index served over TLS by PipIndex.
type Pip struct {
	*Server
	Simple string // the index URL for --index-url: URL + "/simple/"

	password string
	files    map[string][]byte   // file name → wheel
	projects map[string][]string // normalised project name → file names

	mu       sync.Mutex
	requests []string
}

// PipIndex serves a PEP 503 simple index of wheels built in Go over TLS
// on 127.0.0.1 until t's cleanup: /simple/, /simple/<project>/ (links
// with #sha256= digests) and /files/<wheel>.
func PipIndex(t testing.TB, opt PipOptions) *Pip {
	t.Helper()
	wheels := opt.Wheels
	if len(wheels) == 0 {
		wheels = []Wheel{DefaultWheel}
	}
	p := &Pip{password: opt.Password, files: map[string][]byte{}, projects: map[string][]string{}}
	for _, w := range wheels {
		b, err := w.Build()
		if err != nil {
			t.Fatalf("standin: %v", err)
		}
		p.files[w.Filename()] = b
		n := normalizeName(w.Name)
		p.projects[n] = append(p.projects[n], w.Filename())
	}
	p.Server = TLS(t).Serve(t, http.HandlerFunc(p.serve), opt.Hosts...)
	p.Simple = p.URL + "/simple/"
	return p
}

// Env returns the environment that makes pip use the index, trust its CA
// (REQUESTS_CA_BUNDLE overrides pip's --cert when set) and ignore any
// configuration file and find-links directory.
func (p *Pip) Env() []string {
	return []string{
		"PIP_CERT=" + p.CAFile,
		"REQUESTS_CA_BUNDLE=" + p.CAFile,
		"PIP_FIND_LINKS=",
		"PIP_INDEX_URL=" + p.Simple,
		"PIP_CONFIG_FILE=/dev/null",
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INPUT=1",
		"PIP_NO_CACHE_DIR=1",
	}
}

// InstallArgs returns the arguments of `python3 -m pip` that install pkgs
// from the index into target offline: wheels only, no build isolation, no
// retries, and --target so that Debian's externally managed Python
// (PEP 668) does not refuse.
func (p *Pip) InstallArgs(target string, pkgs ...string) []string {
	args := []string{"-m", "pip", "install", "--index-url", p.Simple, "--cert", p.CAFile,
		"--only-binary=:all:", "--no-build-isolation", "--no-cache-dir", "--disable-pip-version-check",
		"--retries", "0", "--timeout", "10", "--target", target}
	return append(args, pkgs...)
}

// Requests returns one line per request: "GET /simple/standin-pkg/ 200".
func (p *Pip) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

func (p *Pip) serve(w http.ResponseWriter, r *http.Request) {
	status := p.respond(w, r)
	p.mu.Lock()
	p.requests = append(p.requests, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, status))
	p.mu.Unlock()
}

func (p *Pip) respond(w http.ResponseWriter, r *http.Request) int {
	if _, pass, ok := r.BasicAuth(); p.password != "" && (!ok || subtle.ConstantTimeCompare([]byte(pass), []byte(p.password)) != 1) {
		w.Header().Set("WWW-Authenticate", `Basic realm="standin pip"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return http.StatusUnauthorized
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed
	}
	path := r.URL.Path
	switch {
	case path == "/simple/":
		p.writeIndex(w)
	case strings.HasPrefix(path, "/simple/"):
		name := strings.TrimPrefix(path, "/simple/")
		project, ok := strings.CutSuffix(name, "/")
		if !ok || strings.Contains(project, "/") {
			http.NotFound(w, r)
			return http.StatusNotFound
		}
		if n := normalizeName(project); n != project {
			http.Redirect(w, r, "/simple/"+n+"/", http.StatusMovedPermanently)
			return http.StatusMovedPermanently
		}
		files, ok := p.projects[project]
		if !ok {
			http.NotFound(w, r)
			return http.StatusNotFound
		}
		p.writeProject(w, project, files)
	case strings.HasPrefix(path, "/files/"):
		b, ok := p.files[strings.TrimPrefix(path, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return http.StatusNotFound
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
		return http.StatusNotFound
	}
	return http.StatusOK
}

func (p *Pip) writeIndex(w http.ResponseWriter) {
	names := make([]string, 0, len(p.projects))
	for n := range p.projects {
		names = append(names, n)
	}
	sort.Strings(names)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<!DOCTYPE html>\n<html><body>\n")
	for _, n := range names {
		fmt.Fprintf(w, "<a href=\"/simple/%s/\">%s</a>\n", html.EscapeString(n), html.EscapeString(n))
	}
	fmt.Fprint(w, "</body></html>\n")
}

func (p *Pip) writeProject(w http.ResponseWriter, project string, files []string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>Links for %s</title></head><body>\n", html.EscapeString(project))
	for _, f := range files {
		sum := sha256.Sum256(p.files[f])
		fmt.Fprintf(w, "<a href=\"/files/%s#sha256=%s\">%s</a>\n", html.EscapeString(f), hex.EncodeToString(sum[:]), html.EscapeString(f))
	}
	fmt.Fprint(w, "</body></html>\n")
}

// Python returns a python3 whose pip works: Debian's /usr/bin/python3
// (what scripts/test.sh installs) if present, else python3 on PATH; or
// skips t (fails it under CI=true).
func Python(t testing.TB) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = Need(t, "python3", PythonHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		Missing(t, fmt.Sprintf("%s -m pip: %v: %s: %s", py, err, strings.TrimSpace(string(out)), PythonHint))
	}
	return py
}
