package witness

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

func FuzzParseAddRequest(f *testing.F) {
	for _, tc := range addCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseAddRequest(body)
		if err != nil {
			return
		}
		if len(r.Proof) > MaxProofLines || r.Old < 0 || len(r.Checkpoint) == 0 {
			t.Fatalf("accepted %+v", r)
		}
		if !bytes.Equal(r.Format(), body) {
			t.Fatalf("%q formats back as %q", body, r.Format())
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, tc := range sizeCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseSize(body)
		if err == nil && (n < 0 || !bytes.Equal(body, []byte(itoa(n)+"\n"))) {
			t.Fatalf("%q read as %d", body, n)
		}
	})
}

// FuzzAdd feeds the witness hostile bodies after a good checkpoint: it
// never moves off it to a tree that does not extend it.
func FuzzAdd(f *testing.F) {
	l := newMemLog(f, "coily/a")
	good := l.sign(f, 10)
	l.grow(f, 12)
	p, _ := l.prove(12, 10)
	f.Add(AddRequest{Old: 10, Proof: p, Checkpoint: l.sign(f, 12)}.Format())
	forked := &memLog{skey: l.skey, vkey: l.vkey, tag: "x"}
	forked.grow(f, 12)
	fp, _ := forked.prove(12, 10)
	f.Add(AddRequest{Old: 10, Proof: fp, Checkpoint: forked.sign(f, 12)}.Format())
	for _, tc := range addCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, _ := newWitness(t, t.TempDir(), l)
		if _, err := s.Add(AddRequest{Checkpoint: good}.Format()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Add(body); err != nil {
			return
		}
		held := s.state["coily/a"]
		if held.N < 10 || held.N > 12 || held.Hash != l.tree(t, held.N).Hash {
			t.Fatalf("the witness moved to a tree of %d records, root %s", held.N, held.Hash)
		}
	})
}

func FuzzCheckCosignature(f *testing.F) {
	l := newMemLog(f, "coily/a")
	s, wkey := newWitness(f, f.TempDir(), l)
	msg := l.sign(f, 5)
	sig, err := s.Add(AddRequest{Checkpoint: msg}.Format())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg, sig)
	f.Add(msg, []byte("— witness.test !!!!\n"))
	f.Add(l.sign(f, 6), sig)
	f.Fuzz(func(t *testing.T, cp, sig []byte) {
		if _, err := CheckCosignature(cp, sig, wkey); err != nil {
			return
		}
		text, _, _ := splitNote(cp)
		mtext, _, _ := splitNote(msg)
		if !bytes.Equal(text, mtext) {
			t.Fatalf("a cosignature of %q accepted for %q", mtext, text)
		}
	})
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// FuzzPullFrom: whatever the host answers a witness that pulls (after it
// kept 10 records), the witness keeps a tree that extends them or refuses
// the answer, naming it, and holds the 10 still.
func FuzzPullFrom(f *testing.F) {
	l := newMemLog(f, "coily/a")
	good := l.sign(f, 10)
	for _, n := range []int64{12, 10, 5, 0} {
		b, _ := addBody(l.sign(f, n), 10, l.prove)
		f.Add(b)
	}
	forked := &memLog{skey: l.skey, vkey: l.vkey, tag: "x"}
	b, _ := addBody(forked.sign(f, 12), 10, forked.prove)
	f.Add(b)
	f.Add(AddRequest{Old: 10, Checkpoint: l.sign(f, 12)}.Format())
	for _, tc := range addCases {
		f.Add([]byte(tc.body))
	}
	l.grow(f, 12)
	f.Fuzz(func(t *testing.T, body []byte) {
		s, _ := newWitness(t, t.TempDir(), l)
		if _, err := s.Add(AddRequest{Checkpoint: good}.Format()); err != nil {
			t.Fatal(err)
		}
		tree, err := s.PullFrom(context.Background(), "coily/a", func(context.Context, int64) ([]byte, error) { return body, nil })
		var refused *RefusedError
		switch {
		case errors.As(err, &refused):
			if refused.Held != l.tree(t, 10) || refused.Why == "" || s.Held("coily/a") != l.tree(t, 10) {
				t.Fatalf("refused %v, holding %+v", refused, s.Held("coily/a"))
			}
		case err != nil:
			t.Fatalf("neither kept nor refused: %v", err)
		case tree.N < 10 || tree.N > 12 || tree.Hash != l.tree(t, tree.N).Hash:
			t.Fatalf("the witness moved to a tree of %d records, root %s", tree.N, tree.Hash)
		}
	})
}
