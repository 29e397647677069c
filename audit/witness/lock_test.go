package witness

import (
	"errors"
	"testing"
)

// TestForgetRefusedWhileServing: the serving witness writes its whole
// state back from memory on its next add, undoing a forget; so forget
// refuses while a witness holds the state's lock, and works once it
// stopped.
func TestForgetRefusedWhileServing(t *testing.T) {
	dir := t.TempDir()
	l := newMemLog(t, "coily/a")
	s, _ := newWitness(t, dir, l)
	if _, err := s.Add(AddRequest{Checkpoint: l.sign(t, 5)}.Format()); err != nil {
		t.Fatal(err)
	}
	if _, err := Forget(dir, "coily/a"); !errors.Is(err, ErrServing) {
		t.Fatalf("forget while serving: %v, want ErrServing", err)
	}
	if _, err := New(Config{Logs: map[string]string{"coily/a": l.vkey}, Key: mustKey(t, dir), Dir: dir}); !errors.Is(err, ErrServing) {
		t.Fatalf("a second witness on the same state: %v, want ErrServing", err)
	}
	_ = s.Close()
	if tr, err := Forget(dir, "coily/a"); err != nil || tr.N != 5 {
		t.Fatalf("forget once stopped: %v %v", tr, err)
	}
}

func mustKey(t *testing.T, dir string) string {
	t.Helper()
	skey, err := EnsureKey(dir, "witness.test")
	if err != nil {
		t.Fatal(err)
	}
	return skey
}
