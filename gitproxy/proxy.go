package gitproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"coily.dev/coily/access"
	"coily.dev/coily/approvals"
	"coily.dev/coily/audit"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
	"coily.dev/coily/visible"
)

// Gate admits requests (access.Gate).
type Gate interface {
	Admit(ctx context.Context, a access.Action) (context.Context, error)
	Refuse(ctx context.Context, c access.Caller, method string, err error) error
}

// Keystore fetches credentials (keystore.Keystore).
type Keystore interface {
	Fetch(ctx context.Context, refs map[string]keystore.Ref) (*keystore.Set, error)
}

// Config holds a Proxy's collaborators; all but Keystore, Log, Resolver
// and the bounds are required.
type Config struct {
	// Dir holds the caches and the pushes in flight (the server's state
	// directory's git/); it is created 0700, and is one proxy's: New
	// removes the pushes a previous one left there.
	Dir  string
	Gate Gate
	// Stopped refuses a principal's push while a lockout or a pause
	// stops it (stops.Controls.Stopped).
	Stopped func(principal string) error
	// Record writes one audit record, durably.
	Record func(context.Context, audit.Record) (audit.Record, error)
	// Approvals holds the pushes that wait for a human.
	Approvals *approvals.Queue
	// Waiting hears each push that waits for a human, once its approval
	// exists (the server's notifier: ntfy, the webhook); nil for none.
	Waiting func(*approvals.Ticket)
	// Keystore fetches the remotes' tokens (keystore.Keystore); nil
	// refuses every remote that names a credential.
	Keystore Keystore
	// Resolver resolves upstream hosts (nil: net.DefaultResolver).
	Resolver *net.Resolver
	// MaxPushBytes bounds a push's body and pack (0: DefaultMaxPushBytes).
	MaxPushBytes int64
	// MaxPushes bounds the pushes in flight (0: DefaultMaxPushes), and
	// MaxPushesPerCaller one principal's (0: DefaultMaxPushesPerCaller).
	MaxPushes, MaxPushesPerCaller int
	// UpstreamTimeout bounds each exchange with upstream (0:
	// DefaultUpstreamTimeout).
	UpstreamTimeout time.Duration
	// CacheBytes and RemoteCacheBytes bound the caches' bytes on disk,
	// in total and per remote (0: DefaultCacheBytes and
	// DefaultRemoteCacheBytes): past a budget, the least recently used
	// caches that no request uses are removed whole.
	CacheBytes       int64
	RemoteCacheBytes int64
	Log              *slog.Logger
}

// Defaults of Config's bounds.
const (
	DefaultMaxPushBytes       = 256 << 20
	DefaultUpstreamTimeout    = 2 * time.Minute
	DefaultCacheBytes         = 10 << 30
	DefaultRemoteCacheBytes   = 4 << 30
	DefaultMaxPushes          = 16
	DefaultMaxPushesPerCaller = 4
	// maxFetchBody bounds an upload-pack request (wants and haves).
	maxFetchBody = 16 << 20
)

// Proxy is the git proxy's http.Handler.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	git    string // the git executable
	home   string // the empty HOME every git runs with
	caches caches
	pushes *pushSlots
}

// New returns a proxy under cfg: it finds git, and makes its
// directories.
func New(cfg Config) (*Proxy, error) {
	if cfg.Dir == "" || cfg.Gate == nil || cfg.Stopped == nil || cfg.Record == nil || cfg.Approvals == nil {
		return nil, errors.New("gitproxy: Dir, Gate, Stopped, Record and Approvals are required")
	}
	if strings.ContainsAny(cfg.Dir, "'\n") || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("gitproxy: directory %q must be absolute, without quotes or newlines", cfg.Dir)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.MaxPushBytes <= 0 {
		cfg.MaxPushBytes = DefaultMaxPushBytes
	}
	if cfg.MaxPushes <= 0 {
		cfg.MaxPushes = DefaultMaxPushes
	}
	if cfg.MaxPushesPerCaller <= 0 {
		cfg.MaxPushesPerCaller = DefaultMaxPushesPerCaller
	}
	if cfg.UpstreamTimeout <= 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.RemoteCacheBytes <= 0 {
		cfg.RemoteCacheBytes = DefaultRemoteCacheBytes
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("gitproxy: %w", err)
	}
	p := &Proxy{cfg: cfg, log: cfg.Log, git: git, home: filepath.Join(cfg.Dir, "home"),
		caches: caches{root: filepath.Join(cfg.Dir, "cache"), total: cfg.CacheBytes, perRemote: cfg.RemoteCacheBytes, log: cfg.Log},
		pushes: &pushSlots{max: cfg.MaxPushes, per: cfg.MaxPushesPerCaller}}
	for _, d := range []string{cfg.Dir, p.home, filepath.Join(cfg.Dir, "cache"), filepath.Join(cfg.Dir, "push")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gitproxy: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("gitproxy: %w", err)
		}
	}
	if err := removeLeftovers(cfg.Dir); err != nil {
		return nil, fmt.Errorf("gitproxy: %w", err)
	}
	if err := p.caches.load(); err != nil {
		return nil, fmt.Errorf("gitproxy: %w", err)
	}
	return p, nil
}

// CacheBudgets are the caches' budgets in bytes, in total and per
// remote, as the proxy applies them.
func (p *Proxy) CacheBudgets() (total, perRemote int64) {
	return p.caches.total, p.caches.perRemote
}

// removeLeftovers removes what a proxy that stopped mid-request left in
// dir: the pushes' private directories (a quarantine each, up to a push's
// bound) and the caches half made. The directory is one proxy's.
func removeLeftovers(dir string) error {
	for _, glob := range []string{filepath.Join(dir, "push", "*"), filepath.Join(dir, "cache", ".init-*")} {
		left, err := filepath.Glob(glob)
		if err != nil {
			return err
		}
		for _, l := range left {
			if err := os.RemoveAll(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// request is one admitted request: who asks, under which policy, for
// which remote.
type request struct {
	ctx    context.Context
	caller access.Caller
	method string
	target Target
	remote *policy.GitRemote
	start  time.Time
	// appTokens are the GitHub App tokens minted for the request, for
	// its audit record (never a token).
	appTokens []string
}

// ServeHTTP serves one smart HTTP request (see the package comment).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, perr := ParsePath(r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	method := access.GitMethodFetch
	if perr == nil && t.Service == ReceivePack {
		method = access.GitMethodPush
	}
	ctx, err := p.cfg.Gate.Admit(r.Context(), access.Git(r.RemoteAddr, method))
	if err != nil {
		writeRefusal(w, err)
		return
	}
	c, err := access.CallerFrom(ctx)
	if err != nil {
		writeRefusal(w, err)
		return
	}
	rq := &request{ctx: ctx, caller: c, method: method, target: t, start: time.Now()}
	if err := p.admitRemote(rq, access.PolicyFrom(ctx), perr); err != nil {
		writeRefusal(w, p.cfg.Gate.Refuse(ctx, c, method, err))
		return
	}
	switch {
	case t.Service == UploadPack:
		p.serveFetch(w, r, rq)
	case t.Refs:
		p.servePushRefs(w, r, rq)
	default:
		p.servePush(w, r, rq)
	}
}

// admitRemote finds the request's remote in the policy and checks that
// the caller may use it for what it asks.
func (p *Proxy) admitRemote(rq *request, pol *policy.Policy, perr error) error {
	if perr != nil {
		return refusal.Wrap(refusal.BadRequest, perr, "%s", perr.Error())
	}
	t := rq.target
	if pol == nil {
		return refusal.New(refusal.Internal, "no policy")
	}
	rq.remote = pol.GitRemote(t.Host, t.Port, t.Repo)
	switch {
	case rq.remote == nil:
		return refusal.New(refusal.PolicyDeny, "no git remote of the policy serves %s:%d/%s", t.Host, t.Port, t.Repo)
	case !pol.MayUseRemote(rq.caller.Subject(), rq.remote):
		return refusal.New(refusal.PermissionDenied, "%s may not use git remote %q", rq.caller.Principal, rq.remote.Name)
	case t.Service == UploadPack && !rq.remote.Fetch:
		return refusal.New(refusal.PolicyDeny, "git remote %q does not allow fetching", rq.remote.Name)
	case t.Service == ReceivePack && rq.remote.Push == nil:
		return refusal.New(refusal.PolicyDeny, "git remote %q does not allow pushing", rq.remote.Name)
	case t.Service == ReceivePack:
		return p.cfg.Stopped(rq.caller.Principal)
	}
	return nil
}

// writeRefusal answers a refusal: its status and one text/plain line
// starting with its code.
func writeRefusal(w http.ResponseWriter, err error) {
	re := refusal.As(err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpStatus(re.Code))
	fmt.Fprintf(w, "%s: %s\n", re.Code, oneLine(re.Msg))
}

// oneLine is s made visible on one line, bounded.
func oneLine(s string) string {
	s = visible.Text(s)
	if len(s) > 1000 {
		s = s[:1000] + "…"
	}
	return s
}

func httpStatus(code refusal.Code) int {
	switch code {
	case refusal.Unauthenticated:
		return http.StatusUnauthorized
	case refusal.PermissionDenied, refusal.PolicyDeny, refusal.ConfirmRejected:
		return http.StatusForbidden
	case refusal.BadRequest:
		return http.StatusBadRequest
	case refusal.RateLimit:
		return http.StatusTooManyRequests
	case refusal.CredentialUnavailable, refusal.Internal:
		return http.StatusBadGateway
	}
	return http.StatusConflict // the state refuses it: lockout, pause, …
}

// record writes the request's audit record; a failure is logged (the
// answer has gone).
func (p *Proxy) record(rq *request, event string, err error, details map[string]string, lists map[string][]string) string {
	rec := access.CallerRecord(rq.caller, rq.method, event, "")
	rec.Decision, rec.Rule = "allow", "git:"+rq.remote.Name
	if err != nil {
		re := refusal.As(err)
		rec.Decision, rec.Code, rec.Reason = "refuse", string(re.Code), re.Msg
	}
	rec.Details, rec.Lists = details, lists
	if rec.Details == nil {
		rec.Details = map[string]string{}
	}
	rec.Details["remote"], rec.Details["url"] = rq.remote.Name, rq.remote.URL(rq.target.Repo)
	if len(rq.appTokens) > 0 {
		if rec.Lists == nil {
			rec.Lists = map[string][]string{}
		}
		rec.Lists["github_app_tokens"] = rq.appTokens
	}
	rec.DurationMS = float64(time.Since(rq.start).Microseconds()) / 1000
	out, aerr := p.cfg.Record(context.WithoutCancel(rq.ctx), rec)
	if aerr != nil {
		p.log.Error("git proxy: audit write failed", "event", event, "err", aerr)
	}
	return out.ID
}

// Limits are the git proxy's HTTP server's: a push's body may be large
// and an answer may wait for an approval, so the bounds are long.
var Limits = httpserve.Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Minute,
	WriteTimeout: 30 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10, PeerConns: 16}
