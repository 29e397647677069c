package stops

import (
	"errors"
	"maps"
	"testing"
	"time"

	"coily.dev/coily/refusal"
)

// memStore is a Store in memory whose writes can be made to fail.
type memStore struct {
	st     State
	fail   error
	writes int
}

func (m *memStore) Stops() (State, error) { return m.st, nil }
func (m *memStore) SetLockout(s Stop) error {
	return m.write(func() { m.st.Lockout = s })
}
func (m *memStore) SetPause(s Stop) error { return m.write(func() { m.st.Pause = s }) }
func (m *memStore) SetSelfPause(principal string, s Stop) error {
	return m.write(func() {
		self := maps.Clone(m.st.SelfPauses)
		if self == nil {
			self = map[string]Stop{}
		}
		self[principal] = s
		m.st.SelfPauses = self
	})
}
func (m *memStore) SetPauses(p Stop, self map[string]Stop) error {
	return m.write(func() { m.st.Pause, m.st.SelfPauses = p, self })
}

func (m *memStore) write(f func()) error {
	m.writes++
	if m.fail != nil {
		return m.fail
	}
	f()
	return nil
}

func newControls(t *testing.T, m *memStore) *Controls {
	t.Helper()
	c, err := New(Config{Store: m, KillGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown(); c.Wait() })
	return c
}

func stopped(by string) Stop { return Stop{Active: true, By: by, Since: time.Now()} }

// A restriction is in force even when the store refuses it; a loosening
// the store refuses changes nothing, and one whose audit fails is not even
// written.
func TestStopsFailClosedOnTheStore(t *testing.T) {
	m := &memStore{fail: errors.New("disk full")}
	c := newControls(t, m)
	if _, _, _, err := c.Pause(stopped("op")); err == nil {
		t.Fatal("a pause the store refused reported persisted")
	}
	if err := c.Stopped("agent"); codeOf(err) != refusal.PauseActive {
		t.Fatalf("after an unpersisted pause: %v", err)
	}
	if _, _, err := c.PauseSelf("agent", stopped("agent")); err == nil {
		t.Fatal("a pause of itself the store refused reported persisted")
	}
	c.Lockout(stopped("op"))
	if err := c.PersistLockout(stopped("op")); err == nil {
		t.Fatal("a lockout the store refused reported persisted")
	}
	if err := c.CheckLockout(); codeOf(err) != refusal.LockoutActive {
		t.Fatalf("after an unpersisted lockout: %v", err)
	}

	refused := errors.New("refused")
	err := c.Unlock(Stop{By: "op"}, func() error { return nil }, func(error) error { return refused })
	if err != refused || codeOf(c.CheckLockout()) != refusal.LockoutActive {
		t.Fatalf("unlock the store refused: %v, then %v", err, c.CheckLockout())
	}
	err = c.Resume(Stop{By: "op"}, func() error { return nil }, func(error) error { return refused })
	if st, _ := c.State(); err != refused || !st.Pause.Active || !st.SelfPauses["agent"].Active {
		t.Fatalf("resume the store refused: %v, state %+v", err, st)
	}

	m.fail = nil
	writes := m.writes
	audit := errors.New("audit log unavailable")
	if err := c.Unlock(Stop{By: "op"}, func() error { return audit }, nil); err != audit || m.writes != writes {
		t.Fatalf("unlock whose audit failed: %v, %d writes", err, m.writes-writes)
	}
	if err := c.Unlock(Stop{By: "op"}, func() error { return nil }, nil); err != nil || c.CheckLockout() != nil || m.st.Lockout.Active {
		t.Fatalf("unlock: %v, %v, stored %+v", err, c.CheckLockout(), m.st.Lockout)
	}
}

// A job admitted before a lockout is stopped by it; none is admitted
// after it, and a lockout in force keeps its first record.
func TestLockoutStopsAdmittedJobs(t *testing.T) {
	c := newControls(t, &memStore{})
	j, err := c.Admit("a", "agent", []string{"true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, already, killed := c.Lockout(stopped("op"))
	if already || killed != 0 || j.StopReason() != refusal.LockoutActive {
		t.Fatalf("lockout: already %v killed %d, job stopped for %q", already, killed, j.StopReason())
	}
	if _, err := c.Admit("b", "agent", nil, nil); codeOf(err) != refusal.LockoutActive {
		t.Fatalf("admitted under a lockout: %v", err)
	}
	again, already, _ := c.Lockout(stopped("other"))
	if !already || again != first {
		t.Fatalf("second lockout replaced the first: %+v, want %+v", again, first)
	}
	if _, running, err := c.Kill("b"); err == nil || running {
		t.Fatalf("killed an id that names no job: %v", err)
	}
	c.Release(j, &Claim{})
	if _, n := c.State(); n != 0 {
		t.Fatalf("%d jobs after release", n)
	}
}
