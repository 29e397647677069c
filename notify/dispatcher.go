package notify

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coily.dev/coily/keystore"
	"coily.dev/coily/policy"
)

// Defaults of Config.
const (
	DefaultQueueSize = 64
	DefaultAttempts  = 4
	DefaultBackoff   = 500 * time.Millisecond
	DefaultTimeout   = 10 * time.Second
)

// Sink names (the sink label of the metrics).
const (
	sinkNtfy    = "ntfy"
	sinkWebhook = "webhook"
)

const userAgent = "coily-notify/1"

// Config configures a Dispatcher.
type Config struct {
	// Keystore fetches the ntfy token and the webhook key the policy
	// names; nil means none (a sink that needs one fails).
	Keystore *keystore.Keystore
	Logger   *slog.Logger
	// Metrics is where coily_notifications_total and
	// coily_notification_retries_total are registered; nil means a
	// registry of its own.
	Metrics prometheus.Registerer
	// ConsoleURL is the web console's base URL when the policy names none
	// ("" for none: notifications then carry no link or button).
	ConsoleURL string
	// HTTPClient sends the deliveries (a copy that follows no redirect);
	// nil means http.DefaultTransport's. coily serve passes its tailnet
	// node's, which reaches tailnet names and the internet alike.
	HTTPClient *http.Client
	// QueueSize bounds each sink's queue (DefaultQueueSize when 0).
	QueueSize int
	// Attempts bounds the tries of one delivery (DefaultAttempts when 0);
	// Backoff is the wait before the first retry, doubled for each next
	// one (DefaultBackoff when 0); Timeout bounds each attempt
	// (DefaultTimeout when 0).
	Attempts int
	Backoff  time.Duration
	Timeout  time.Duration
	Now      func() time.Time
}

// Dispatcher delivers the server's events to the sinks the policy in
// force names. Configure and Notify never block; deliveries run on one
// goroutine per sink, in order.
type Dispatcher struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	settings atomic.Pointer[policy.Notify]
	refusals refusalCounter
	secrets  secretCache
	sinks    []*worker

	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc
	mu     sync.RWMutex // guards closed against sends on closed queues
	closed bool
	wg     sync.WaitGroup
}

// worker is one sink's queue and delivery goroutine.
type worker struct {
	sink  sink
	queue chan job
}

// job is one event to deliver, with the settings in force when it
// happened; warm jobs only read the sink's secret.
type job struct {
	ev       Event
	settings *policy.Notify
	warm     bool
}

// sink is a delivery channel.
type sink interface {
	name() string
	configured(*policy.Notify) bool
	secretRef(*policy.Notify) keystore.Ref
	send(context.Context, *delivery) error
}

// New starts a dispatcher; Close stops it.
func New(cfg Config) (*Dispatcher, error) {
	cfg.QueueSize = cmp.Or(cfg.QueueSize, DefaultQueueSize)
	cfg.Attempts = cmp.Or(cfg.Attempts, DefaultAttempts)
	cfg.Backoff = cmp.Or(cfg.Backoff, DefaultBackoff)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Redirects are never followed: a signed body or a token goes where
	// the policy sends it, nowhere else (a 3xx fails the delivery).
	client := &http.Client{}
	if cfg.HTTPClient != nil {
		*client = *cfg.HTTPClient
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.HTTPClient = client
	d := &Dispatcher{cfg: cfg, log: cfg.Logger.With("component", "notify")}
	var err error
	if d.metrics, err = newMetrics(cfg.Metrics, []string{sinkNtfy, sinkWebhook}); err != nil {
		return nil, err
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, s := range []sink{ntfySink{}, webhookSink{}} {
		w := &worker{sink: s, queue: make(chan job, cfg.QueueSize)}
		d.sinks = append(d.sinks, w)
		d.wg.Add(1)
		go d.run(w)
	}
	return d, nil
}

// Configure puts the notify block of the policy in force (nil: notify
// nothing). The secrets it names are read in the background, so that a
// notification can be sent when the keystore cannot answer any more
// (after a lockout revoked its token).
func (d *Dispatcher) Configure(n *policy.Notify) {
	d.settings.Store(n)
	var keep []keystore.Ref
	for _, w := range d.sinks {
		if n != nil && w.sink.configured(n) {
			if ref := w.sink.secretRef(n); ref != (keystore.Ref{}) {
				keep = append(keep, ref)
				d.enqueue(w, job{settings: n, warm: true}, false)
			}
		}
	}
	d.secrets.keepOnly(keep)
}

// Notify queues ev for every sink of the policy in force that wants it.
// It never blocks: a sink whose queue is full drops ev and counts it.
func (d *Dispatcher) Notify(ev Event) {
	n := d.settings.Load()
	if n == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = d.cfg.Now()
	}
	if ev.Kind == KindRefusal {
		if !n.Wants(policy.NotifyRefusals) || ev.Refusal == nil {
			return
		}
		r, ok := d.refusals.add(*ev.Refusal, ev.Time, n.RefusalCount, n.RefusalWindow)
		if !ok {
			return
		}
		ev = Event{Kind: KindRefusals, Time: ev.Time, Refusals: r}
	} else if !n.Wants(string(ev.Kind)) {
		return
	}
	for _, w := range d.sinks {
		if w.sink.configured(n) {
			d.enqueue(w, job{ev: ev, settings: n}, true)
		}
	}
}

// enqueue sends j to w's queue without blocking; a dropped event is
// counted and logged (a dropped warm-up is not: it is only an
// optimisation).
func (d *Dispatcher) enqueue(w *worker, j job, count bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.closed {
		select {
		case w.queue <- j:
			return
		default:
		}
	}
	if count {
		d.metrics.result(w.sink.name(), resultDropped)
		d.log.Warn("notification dropped: the queue is full or the dispatcher closed", "sink", w.sink.name(), "event", string(j.ev.Kind))
	}
}

// Close stops accepting events and delivers what is queued until ctx
// ends; then in-flight deliveries are cancelled. It returns ctx's error
// if it had to cancel.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		for _, w := range d.sinks {
			close(w.queue)
		}
	}
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		d.cancel()
		return nil
	case <-ctx.Done():
		d.cancel()
		<-done
		return ctx.Err()
	}
}

// run delivers w's jobs in order until its queue is closed.
func (d *Dispatcher) run(w *worker) {
	defer d.wg.Done()
	for j := range w.queue {
		if j.warm {
			_, _ = d.secret(d.ctx, w.sink.secretRef(j.settings))
			continue
		}
		d.deliver(w.sink, j)
	}
}

// errClosed reports a delivery cut by Close.
var errClosed = errors.New("dispatcher closed")
