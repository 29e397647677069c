package notify

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func payloadBody(t testing.TB, id string) []byte {
	t.Helper()
	body, err := json.Marshal(Payload{Version: 1, ID: id, Event: EventLockout})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// A retry the receiver never saw (its 2xx to the first copy was lost, and
// the retry was captured on the way) is refused while it is fresh, though
// the first copy has gone stale.
func TestVerifierRefusesUnseenRetry(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	now := t0
	v := &Verifier{Secret: testKey, Now: func() time.Time { return now }}
	body := payloadBody(t, "delivery-3")
	if _, err := v.Verify(signed(t, t0.Unix(), body), body); err != nil {
		t.Fatalf("first: %v", err)
	}
	retry := signed(t, t0.Add(30*time.Second).Unix(), body) // never delivered
	now = t0.Add(DefaultTolerance + 30*time.Second)
	if _, err := v.Verify(retry, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("unseen retry replayed at its last fresh second: %v", err)
	}
}

// Full, the Verifier refuses new ids and forgets none that could still be
// replayed; once ids go stale, it makes room.
func TestVerifierFullFailsClosed(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	now := t0
	v := &Verifier{Secret: testKey, Now: func() time.Time { return now }, MaxIDs: 2}
	a, b, c := payloadBody(t, "a"), payloadBody(t, "b"), payloadBody(t, "c")
	for _, body := range [][]byte{a, b} {
		if _, err := v.Verify(signed(t, t0.Unix(), body), body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Verify(signed(t, t0.Unix(), c), c); !errors.Is(err, ErrFull) || errors.Is(err, ErrReplay) {
		t.Fatalf("third id while full: %v", err)
	}
	now = t0.Add(DefaultTolerance)
	if _, err := v.Verify(signed(t, now.Unix(), a), a); !errors.Is(err, ErrReplay) {
		t.Fatalf("remembered id while full (a retry signed now): %v", err)
	}
	if _, err := v.Verify(signed(t, now.Unix(), c), c); !errors.Is(err, ErrFull) {
		t.Fatalf("third id while full, later: %v", err)
	}
	// a's retry extended it to t0+2×tolerance+retrySpan; b was not extended.
	now = t0.Add(DefaultTolerance + retrySpan + time.Second)
	if _, err := v.Verify(signed(t, now.Unix(), c), c); err != nil {
		t.Fatalf("after b went stale: %v", err)
	}
	if _, err := v.Verify(signed(t, now.Unix(), a), a); !errors.Is(err, ErrReplay) {
		t.Fatalf("a, extended: %v", err)
	}
	if _, err := v.Verify(signed(t, now.Unix(), b), b); !errors.Is(err, ErrFull) {
		t.Fatalf("b, forgotten, while full again: %v", err)
	}
}

// A refused delivery carries no payload, so a receiver that looks only at
// the payload never acts on a replay.
func TestVerifierNoPayloadOnReplay(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	v := &Verifier{Secret: testKey, Now: func() time.Time { return t0 }}
	body, _ := json.Marshal(Payload{Version: 1, ID: "delivery-9", Event: EventLockout})
	if p, err := v.Verify(signed(t, t0.Unix(), body), body); err != nil || p == nil {
		t.Fatalf("first: %v %v", p, err)
	}
	if p, err := v.Verify(signed(t, t0.Unix(), body), body); !errors.Is(err, ErrReplay) || p != nil {
		t.Fatalf("replay: %v %v", p, err)
	}
}
