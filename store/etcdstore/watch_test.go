package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"coily.dev/coily/internal/poll"
	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

// TestWatchSeesAnotherHostsLockout: a host watching the stops learns of a
// lockout written through another member.
func TestWatchSeesAnotherHostsLockout(t *testing.T) {
	h := threeHosts(t)
	_, rev, err := h[0].StopsAt()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := h[0].Watch(ctx, rev+1)
	lock := store.Stop{Active: true, By: "alice", Since: time.Now().UTC().Round(0)}
	if err := h[2].SetLockout(lock); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Err != nil || !ev.Stops.Lockout.Active || ev.Stops.Lockout.By != "alice" || ev.Rev <= rev {
			t.Fatalf("event %+v, want alice's lockout after revision %d", ev, rev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s of the lockout")
	}
	if err := h[1].SetLockout(store.Stop{}); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Err != nil || ev.Stops.Lockout.Active {
		t.Fatalf("event %+v, want the unlock", ev)
	}
	cancel()
	poll.Until(t, 10*time.Second, "the watch channel closes", func() bool {
		select {
		case _, ok := <-events:
			return !ok
		default:
			return false
		}
	})
}

// TestWatchAfterCompaction: a watch from a revision etcd has compacted
// away sends the stops as they stand, then goes on with later changes.
func TestWatchAfterCompaction(t *testing.T) {
	s := open(t)
	_, rev, err := s.StopsAt()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLockout(store.Stop{Active: true, By: "early"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPause(store.Stop{Active: true, By: "later"}); err != nil {
		t.Fatal(err)
	}
	_, now, _ := s.StopsAt()
	if _, err := raw(t).Compact(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := s.Watch(ctx, rev+1)
	next := func() etcdstore.StopsEvent {
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
			return etcdstore.StopsEvent{}
		}
	}
	if ev := next(); ev.Err != nil || !ev.Stops.Lockout.Active || !ev.Stops.Pause.Active || ev.Rev < now {
		t.Fatalf("first event %+v, want the stops as they stand at %d", ev, now)
	}
	if err := s.SetPause(store.Stop{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Err != nil || ev.Stops.Pause.Active || !ev.Stops.Lockout.Active {
		t.Fatalf("after resume: %+v", ev)
	}
}
