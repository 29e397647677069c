package witness

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// PusherConfig configures StartPusher.
type PusherConfig struct {
	Clients []*Client
	Logger  *slog.Logger
	// Tries bounds the tries of one checkpoint before the pusher waits
	// for the next one (or Idle); 0 means 5.
	Tries int
	// Backoff is the wait after the first failed try, doubled after each
	// (at most a minute); 0 means a second.
	Backoff time.Duration
	// Idle is how long a checkpoint that failed Tries times waits before
	// it is tried again when no newer one comes; 0 means 5 minutes.
	Idle time.Duration
	// Timeout bounds one try; 0 means 15 seconds.
	Timeout time.Duration
	// Failed is told of every failed try (a metric).
	Failed func(url string)
	// Outage is told once when a witness stops taking checkpoints (the
	// first failure after a success, or since the start), and Refused
	// errors (*AheadError, *InconsistentError) name records the log lost
	// or changed; Recovered when it takes one again.
	Outage    func(url string, err error)
	Recovered func(url string)
	// Down are the witnesses known not to take checkpoints at start
	// (already reported): no Outage until they took one again.
	Down []string
}

// Pusher pushes every checkpoint it is offered to its witnesses, each in
// a goroutine of its own, in order, off the signing path: Offer never
// waits, and a newer checkpoint replaces one not yet pushed (a witness
// needs only the latest: the consistency proof covers what it skipped).
type Pusher struct {
	cfg     PusherConfig
	workers []*worker
	wg      sync.WaitGroup
}

type worker struct {
	c    *Client
	next chan []byte // the latest checkpoint not yet taken (one slot)
	stop chan struct{}
}

// StartPusher starts the pushers; Stop ends them.
func StartPusher(cfg PusherConfig) *Pusher {
	if cfg.Tries <= 0 {
		cfg.Tries = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 5 * time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Pusher{cfg: cfg}
	stop := make(chan struct{})
	for _, c := range cfg.Clients {
		w := &worker{c: c, next: make(chan []byte, 1), stop: stop}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.run(w) }()
	}
	return p
}

// Offer hands a signed checkpoint to every witness's pusher, replacing
// one not yet taken. It never blocks.
func (p *Pusher) Offer(signed []byte) {
	for _, w := range p.workers {
		select {
		case <-w.next: // an older one not taken yet
		default:
		}
		select {
		case w.next <- signed:
		default: // a concurrent Offer filled it: the notary's are not
		}
	}
}

// Stop ends the pushers, abandoning a push under way.
func (p *Pusher) Stop() {
	if len(p.workers) > 0 {
		close(p.workers[0].stop)
	}
	p.wg.Wait()
}

func (p *Pusher) run(w *worker) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-w.stop; cancel() }()
	down := slices.Contains(p.cfg.Down, w.c.URL)
	var pending []byte
	for {
		if pending == nil {
			select {
			case <-w.stop:
				return
			case pending = <-w.next:
			}
		}
		var err error
		pending, err = p.push(ctx, w, pending)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			pending = nil
			if down && p.cfg.Recovered != nil {
				p.cfg.Recovered(w.c.URL)
			}
			down = false
			continue
		}
		if !down && p.cfg.Outage != nil {
			p.cfg.Outage(w.c.URL, err)
		}
		down = true
		p.cfg.Logger.Error("witness: the checkpoint was not taken", "witness", w.c.URL, "err", err)
		select {
		case <-w.stop:
			return
		case pending = <-w.next:
		case <-time.After(p.cfg.Idle):
		}
	}
}

// push tries signed up to Tries times, backing off; a refusal that names
// lost records is not tried again. A newer checkpoint offered meanwhile
// replaces it; push returns the one it tried last.
func (p *Pusher) push(ctx context.Context, w *worker, signed []byte) ([]byte, error) {
	wait := p.cfg.Backoff
	var err error
	for try := 0; try < p.cfg.Tries; try++ {
		tctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		_, err = w.c.Add(tctx, signed)
		cancel()
		if err == nil || ctx.Err() != nil {
			return signed, err
		}
		if p.cfg.Failed != nil {
			p.cfg.Failed(w.c.URL)
		}
		if Refused(err) {
			return signed, err
		}
		select {
		case <-ctx.Done():
			return signed, ctx.Err()
		case newer := <-w.next:
			signed = newer
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
	return signed, err
}

// Refused reports whether err is a witness's proven refusal that names
// records the log lost (*AheadError) or changed (*InconsistentError), or
// a log key replaced (*ReplacedError).
func Refused(err error) bool {
	var ahead *AheadError
	var inc *InconsistentError
	var repl *ReplacedError
	return errors.As(err, &ahead) || errors.As(err, &inc) || errors.As(err, &repl)
}
