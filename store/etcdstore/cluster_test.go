package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// TestOpenRefuses: no seal key, a prefix that names nothing, or a client
// without a client certificate: nothing opens.
func TestOpenRefuses(t *testing.T) {
	base := etcdstore.Config{Endpoints: cluster.Endpoints(), TLS: cluster.ClientTLS(), Prefix: "/coily/x/", SealKey: sealKey, CallTimeout: 2 * time.Second}
	for name, change := range map[string]func(*etcdstore.Config){
		"no seal key":     func(c *etcdstore.Config) { c.SealKey = nil },
		"short seal key":  func(c *etcdstore.Config) { c.SealKey = sealKey[:16] },
		"root prefix":     func(c *etcdstore.Config) { c.Prefix = "/" },
		"relative prefix": func(c *etcdstore.Config) { c.Prefix = "coily/" },
		"open prefix":     func(c *etcdstore.Config) { c.Prefix = "/coily" },
		"no endpoints":    func(c *etcdstore.Config) { c.Endpoints = nil },
		"no client cert":  func(c *etcdstore.Config) { c.TLS = cluster.ServerOnlyTLS() },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := base
			change(&cfg)
			start := time.Now()
			s, err := etcdstore.Open(context.Background(), cfg)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("refused after %v", d)
			}
		})
	}
}

// TestCutClientUnavailable: a host cut from the cluster gets
// ErrUnavailable within its call timeout, and what it tried is either
// wholly written or not at all.
func TestCutClientUnavailable(t *testing.T) {
	p, err := cluster.Proxy(0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const timeout = 2 * time.Second
	cut := openCfg(t, etcdstore.Config{Endpoints: []string{p.Endpoint()}, CallTimeout: timeout})
	other := open(t, cluster.Endpoint(1))
	if _, err := cut.Stops(); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	exp := time.Now().Add(10 * time.Minute)
	for name, call := range map[string]func() error{
		"Stops":      func() error { _, err := cut.Stops(); return err },
		"SetLockout": func() error { return cut.SetLockout(store.Stop{Active: true}) },
		"Take": func() error {
			_, _, err := cut.Take("k", store.Rate{PerMinute: 1, Burst: 1}, time.Now())
			return err
		},
		"IssueKey": func() error { _, err := cut.IssueKey("sb", secret(), time.Now()); return err },
		"AcceptRelay": func() error {
			_, _, err := cut.AcceptRelay(relay("id", "sb"), "n", exp)
			return err
		},
		"Leases": func() error { _, err := cut.Leases(); return err },
	} {
		start := time.Now()
		err := call()
		if d := time.Since(start); d > timeout+2*time.Second {
			t.Errorf("%s: answered after %v, the call timeout is %v", name, d, timeout)
		}
		wantErr(t, err, store.ErrUnavailable)
	}
	// The others go on meanwhile.
	if _, _, err := other.Take("k2", store.Rate{PerMinute: 1, Burst: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	poll.Until(t, 30*time.Second, "the healed host to reach the cluster", func() bool {
		_, err := cut.Stops()
		return err == nil
	})
	// Nothing half-written: the relay and its nonce are both there or
	// both absent.
	_, rerr := other.Relay("id")
	_, _, nerr := other.AcceptRelay(relay("id-2", "sb"), "n", exp)
	if (rerr == nil) != (nerr != nil) {
		t.Fatalf("relay record %v, nonce %v: half-written", rerr, nerr)
	}
}

// TestMemberRestartKeepsState: with one member down the others decide;
// the member restarted has every write, and a host on it reads them.
func TestMemberRestartKeepsState(t *testing.T) {
	s := open(t, cluster.Endpoint(1), cluster.Endpoint(2))
	if err := s.SetLockout(store.Stop{Active: true, By: "before"}); err != nil {
		t.Fatal(err)
	}
	cluster.Stop(0)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := cluster.Restart(0); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := s.IssueKey("while-down", secret(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Restart(0); err != nil {
		t.Fatal(err)
	}
	restarted = true
	on0 := open(t, cluster.Endpoint(0))
	st, err := on0.Stops()
	if err != nil || st.Lockout.By != "before" {
		t.Fatalf("stops on the restarted member: %+v, %v", st, err)
	}
	if _, err := on0.Key("while-down"); err != nil {
		t.Fatalf("key written while the member was down: %v", err)
	}
}

// TestQuorumLost: a host whose member has lost its quorum gets
// ErrUnavailable from every call within its call timeout, its watch of
// the stops ends with ErrUnavailable (never goes quiet), and it works
// again once the quorum is back.
func TestQuorumLost(t *testing.T) {
	const timeout = 2 * time.Second
	s := openCfg(t, etcdstore.Config{Endpoints: []string{cluster.Endpoint(0)}, CallTimeout: timeout})
	_, rev, err := s.StopsAt()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := s.Watch(ctx, rev+1)
	stopped := []int{1, 2}
	t.Cleanup(func() {
		for _, i := range stopped {
			if err := cluster.Restart(i); err != nil {
				t.Error(err)
			}
		}
	})
	cluster.Stop(1)
	cluster.Stop(2)

	for name, call := range map[string]func() error{
		"Stops": func() error { _, err := s.Stops(); return err },
		"Take": func() error {
			_, _, err := s.Take("k", store.Rate{PerMinute: 1, Burst: 1}, time.Now())
			return err
		},
		"Health": func() error { return s.Health(context.Background()) },
	} {
		start := time.Now()
		err := call()
		if d := time.Since(start); d > timeout+2*time.Second {
			t.Errorf("%s: answered after %v, the call timeout is %v", name, d, timeout)
		}
		wantErr(t, err, store.ErrUnavailable)
	}
	select {
	case ev := <-events:
		wantErr(t, ev.Err, store.ErrUnavailable)
	case <-time.After(30 * time.Second):
		t.Fatal("the watch went quiet without its quorum")
	}
	if _, open := <-events; open {
		t.Fatal("the watch goes on after its error")
	}

	for len(stopped) > 0 {
		if err := cluster.Restart(stopped[0]); err != nil {
			t.Fatal(err)
		}
		stopped = stopped[1:]
	}
	poll.Until(t, 30*time.Second, "the host to work again", func() bool {
		ok, _, err := s.Take("k", store.Rate{PerMinute: 1, Burst: 1}, time.Now())
		return ok && err == nil
	})
}
