package witness

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// Config configures New.
type Config struct {
	// Logs are the logs witnessed: origin -> the log's verifier key
	// (what `coily audit key` prints on its host).
	Logs map[string]string
	Key  string // the witness's private key (GenerateKey); never logged
	// Dir keeps the state file (StateFile): the latest checkpoint
	// cosigned for each log.
	Dir    string
	Logger *slog.Logger
}

// Server is a witness: an http.Handler serving POST /add-checkpoint and
// GET /checkpoint/<origin> (mount it under a prefix with
// http.StripPrefix).
type Server struct {
	logs   map[string]note.Verifier
	vkeys  map[string]string // origin -> the log's verifier key
	signer note.Signer
	dir    string
	log    *slog.Logger

	mu    sync.Mutex // held from reading the state to writing it
	state state
	mux   *http.ServeMux
	lock  *os.File // the flock on the state while it serves
}

// New opens a witness's state in cfg.Dir (fail closed: a state file that
// does not read is an error, never "no checkpoint seen").
func New(cfg Config) (*Server, error) {
	s := &Server{logs: map[string]note.Verifier{}, vkeys: map[string]string{}, dir: cfg.Dir, log: cfg.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	for origin, vkey := range cfg.Logs {
		v, err := note.NewVerifier(strings.TrimSpace(vkey))
		if err != nil {
			return nil, fmt.Errorf("witness: log %s: verifier key: %w", origin, err)
		}
		if v.Name() != origin {
			return nil, fmt.Errorf("witness: log %s: its verifier key is named %s", origin, v.Name())
		}
		s.logs[origin], s.vkeys[origin] = v, strings.TrimSpace(vkey)
	}
	signer, err := cosigner(cfg.Key)
	if err != nil {
		return nil, err
	}
	s.signer = signer
	if s.lock, err = lockState(cfg.Dir); err != nil {
		return nil, err
	}
	if s.state, err = loadState(cfg.Dir); err != nil {
		s.lock.Close()
		return nil, err
	}
	s.mux.HandleFunc("POST /add-checkpoint", s.serveAdd)
	s.mux.HandleFunc("GET /checkpoint/", s.serveLatest)
	return s, nil
}

// Close releases the state's lock (the witness stopped serving).
func (s *Server) Close() error { return s.lock.Close() }

// ServeHTTP serves the witness protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Latest is the latest checkpoint cosigned for origin (with the log's
// signature and the witness's cosignature), nil when none.
func (s *Server) Latest(origin string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[origin].Signed
}

// statusError is an add-checkpoint refusal: the HTTP status and why.
type statusError struct {
	status int
	size   int64 // with 409 and sized: the size held
	sized  bool
	why    string
}

func (e *statusError) Error() string { return e.why }

func refuse(status int, format string, args ...any) error {
	return &statusError{status: status, why: fmt.Sprintf(format, args...)}
}

func (s *Server) serveAdd(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		http.Error(w, "request body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	sig, err := s.Add(body)
	var se *statusError
	switch {
	case errors.As(err, &se) && se.sized:
		w.Header().Set("Content-Type", SizeType)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "%d\n", se.size)
	case errors.As(err, &se):
		http.Error(w, se.why, se.status)
	case err != nil:
		s.log.Error("witness: add-checkpoint", "err", err)
		http.Error(w, "the witness could not keep the checkpoint", http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(sig)
	}
}

// Add handles an add-checkpoint body (untrusted) and returns the
// cosignature line, once the checkpoint is kept on disk.
func (s *Server) Add(body []byte) ([]byte, error) {
	req, err := ParseAddRequest(body)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	v, ok := s.logs[origin(req.Checkpoint)]
	if !ok {
		return nil, refuse(http.StatusNotFound, "this witness does not witness the log %q", origin(req.Checkpoint))
	}
	n, err := note.Open(req.Checkpoint, note.VerifierList(v))
	var unverified *note.UnverifiedNoteError
	switch {
	case errors.As(err, &unverified):
		return nil, refuse(http.StatusForbidden, "the checkpoint is not signed by %s's key", v.Name())
	case err != nil:
		return nil, refuse(http.StatusBadRequest, "checkpoint: %v", err)
	}
	c, err := audit.ParseCheckpoint([]byte(n.Text))
	if err != nil || c.Origin != v.Name() {
		return nil, refuse(http.StatusBadRequest, "checkpoint: %v", err)
	}
	if req.Old > c.N {
		return nil, refuse(http.StatusBadRequest, "old size %d is larger than the checkpoint's %d", req.Old, c.N)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.state[c.Origin]
	if req.Old != held.N {
		return nil, &statusError{status: http.StatusConflict, sized: true, size: held.N,
			why: fmt.Sprintf("the witness holds %d records of %s, not %d", held.N, c.Origin, req.Old)}
	}
	if err := consistent(req, held, c); err != nil {
		s.log.Warn("witness: refused a checkpoint", "origin", c.Origin, "held", held.N, "size", c.N, "err", err)
		return nil, err
	}
	sig, err := cosign(s.signer, []byte(n.Text))
	if err != nil {
		return nil, err
	}
	if held.Signed == nil || c.N > held.N {
		signed := append(append([]byte{}, req.Checkpoint...), sig...)
		if err := s.state.put(s.dir, c.Origin, entry{Tree: c.Tree, Signed: signed}); err != nil {
			return nil, err
		}
	}
	return sig, nil
}

// consistent checks that c extends the tree held, with req's proof.
func consistent(req AddRequest, held entry, c audit.Checkpoint) error {
	switch {
	case c.N == held.N && len(req.Proof) != 0:
		return refuse(http.StatusUnprocessableEntity, "a consistency proof between trees of the same size")
	case c.N == held.N && held.Signed != nil && c.Hash != held.Hash:
		return refuse(http.StatusConflict, "a checkpoint of %d records with root %s: the witness holds root %s (a fork)", c.N, c.Hash, held.Hash)
	case c.N == held.N:
		return nil
	case held.N == 0 && len(req.Proof) != 0:
		return refuse(http.StatusUnprocessableEntity, "a consistency proof from an empty tree")
	case held.N == 0:
		return nil
	}
	if err := tlog.CheckTree(req.Proof, c.N, c.Hash, held.N, held.Hash); err != nil {
		return refuse(http.StatusUnprocessableEntity, "the tree of %d records is not consistent with the %d the witness holds: %v", c.N, held.N, err)
	}
	return nil
}

// serveLatest is GET /checkpoint/<origin, path-escaped>: coily's
// addition to the protocol.
func (s *Server) serveLatest(w http.ResponseWriter, r *http.Request) {
	esc, _ := strings.CutPrefix(r.URL.EscapedPath(), "/checkpoint/")
	o, err := url.PathUnescape(esc)
	if err != nil {
		http.Error(w, "origin: "+err.Error(), http.StatusBadRequest)
		return
	}
	msg := s.Latest(o)
	if msg == nil {
		http.Error(w, "no checkpoint of "+o, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(msg)
}

// CheckpointPath is the path, under a witness's prefix, of the latest
// checkpoint it cosigned for origin.
func CheckpointPath(origin string) string { return "/checkpoint/" + url.PathEscape(origin) }
