package notify

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

var testKey = []byte("whsec_test-signing-key")

func signed(t testing.TB, ts int64, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, Sign(testKey, ts, body))
	return h
}

func TestSignKnownAnswer(t *testing.T) {
	// printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test-signing-key
	// (and the Python recipe of docs/operations.md) give the same digest.
	got := Sign(testKey, 1700000000, []byte(`{"a":1}`))
	const want = "sha256=46d1e5727c9e30614dece33698bbcb5b2a5a701cc0473285c68386e86612a3ed"
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestVerifySignature(t *testing.T) {
	now := time.Unix(1700000000, 0)
	body := []byte(`{"version":1,"id":"d1","event":"lockout"}`)
	ts := now.Unix()
	good := signed(t, ts, body)
	with := func(k, v string) http.Header {
		h := good.Clone()
		h.Set(k, v)
		return h
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"good", good, body, nil},
		{"tampered body", good, []byte(`{"version":1,"id":"d1","event":"pause"}`), ErrBadSignature},
		{"extra byte", good, append(append([]byte{}, body...), ' '), ErrBadSignature},
		{"other key", signedWith([]byte("other"), ts, body), body, ErrBadSignature},
		{"timestamp moved", with(HeaderTimestamp, strconv.FormatInt(ts+1, 10)), body, ErrBadSignature},
		{"stale", signed(t, ts-int64(DefaultTolerance/time.Second)-1, body), body, ErrStale},
		{"future", signed(t, ts+int64(DefaultTolerance/time.Second)+1, body), body, ErrStale},
		{"no signature", http.Header{HeaderTimestamp: good[HeaderTimestamp]}, body, ErrNoSignature},
		{"no timestamp", http.Header{HeaderSignature: good[HeaderSignature]}, body, ErrNoSignature},
		{"two signatures", http.Header{HeaderTimestamp: good[HeaderTimestamp], HeaderSignature: {good.Get(HeaderSignature), good.Get(HeaderSignature)}}, body, ErrMalformed},
		{"uppercase hex", with(HeaderSignature, "sha256="+upper(good.Get(HeaderSignature)[7:])), body, ErrMalformed},
		{"other scheme", with(HeaderSignature, "sha1="+good.Get(HeaderSignature)[7:]), body, ErrMalformed},
		{"short", with(HeaderSignature, good.Get(HeaderSignature)[:70]), body, ErrMalformed},
		{"not hex", with(HeaderSignature, "sha256="+string(make([]byte, 64))), body, ErrMalformed},
		{"signed timestamp", with(HeaderTimestamp, "+"+strconv.FormatInt(ts, 10)), body, ErrMalformed},
		{"leading zero", with(HeaderTimestamp, "0"+strconv.FormatInt(ts, 10)), body, ErrMalformed},
		{"negative", with(HeaderTimestamp, "-1"), body, ErrMalformed},
		{"huge", with(HeaderTimestamp, "9999999999999"), body, ErrMalformed},
		{"CRLF", with(HeaderTimestamp, strconv.FormatInt(ts, 10)+"\r\n"), body, ErrMalformed},
	} {
		err := VerifySignature(testKey, tc.h, tc.body, now, DefaultTolerance)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func signedWith(key []byte, ts int64, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, Sign(key, ts, body))
	return h
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestVerifierRefusesReplays(t *testing.T) {
	now := time.Unix(1700000000, 0)
	v := &Verifier{Secret: testKey, Now: func() time.Time { return now }}
	body, _ := json.Marshal(Payload{Version: 1, ID: "delivery-1", Event: EventLockout})
	h := signed(t, now.Unix(), body)
	if p, err := v.Verify(h, body); err != nil || p.ID != "delivery-1" || p.Event != EventLockout {
		t.Fatalf("first: %+v %v", p, err)
	}
	if _, err := v.Verify(h, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay: %v", err)
	}
	// Re-signed with a fresh timestamp (a retry of the same delivery): still once.
	now = now.Add(time.Minute)
	if _, err := v.Verify(signed(t, now.Unix(), body), body); !errors.Is(err, ErrReplay) {
		t.Fatalf("retry: %v", err)
	}
	// Later than the tolerance: stale, whatever the id.
	now = now.Add(DefaultTolerance + time.Minute)
	if _, err := v.Verify(h, body); !errors.Is(err, ErrStale) {
		t.Fatalf("late replay: %v", err)
	}
	for _, bad := range []string{`{"version":2,"id":"x"}`, `{"version":1}`, `{"version":1,"id":"x"} {}`, `[]`, `{"version":1,"id":"x"`} {
		if _, err := v.Verify(signed(t, now.Unix(), []byte(bad)), []byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// A retry reuses the delivery id with a later timestamp: the id is
// remembered until the freshest copy seen (accepted or refused) goes
// stale, so a captured retry is never accepted once its id would
// otherwise have been forgotten.
func TestVerifierRemembersRetriesUntilStale(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	now := t0
	v := &Verifier{Secret: testKey, Now: func() time.Time { return now }}
	body, _ := json.Marshal(Payload{Version: 1, ID: "delivery-2", Event: EventLockout})
	if _, err := v.Verify(signed(t, t0.Unix(), body), body); err != nil {
		t.Fatalf("first: %v", err)
	}
	retry := signed(t, t0.Add(30*time.Second).Unix(), body)
	now = t0.Add(30 * time.Second)
	if _, err := v.Verify(retry, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("retry: %v", err)
	}
	// The retry, captured and replayed after the first attempt went stale
	// but while its own timestamp is fresh.
	now = t0.Add(DefaultTolerance + time.Second)
	if _, err := v.Verify(retry, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("replayed retry at t0+5m1s: %v", err)
	}
	// A retry the Verifier never saw (signed later still): refused too,
	// and it extends the memory again.
	late := signed(t, t0.Add(60*time.Second).Unix(), body)
	if _, err := v.Verify(late, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("unseen retry: %v", err)
	}
	now = t0.Add(60*time.Second + DefaultTolerance)
	if _, err := v.Verify(late, body); !errors.Is(err, ErrReplay) {
		t.Fatalf("unseen retry replayed at its last fresh second: %v", err)
	}
	now = now.Add(time.Second)
	if _, err := v.Verify(late, body); !errors.Is(err, ErrStale) {
		t.Fatalf("past every copy's freshness: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	body := []byte(`{"version":1,"id":"d1","event":"lockout"}`)
	f.Add(int64(1700000000), "", "", body)
	f.Add(int64(1700000000), "1700000000", Sign(testKey, 1700000000, body), body)
	f.Add(int64(1700000000), "1700000000", "sha256=00", body)
	f.Add(int64(-1), "0", "sha256=", []byte{})
	f.Fuzz(func(t *testing.T, now int64, ts, sig string, body []byte) {
		h := http.Header{}
		if ts != "" {
			h[HeaderTimestamp] = []string{ts}
		}
		if sig != "" {
			h[HeaderSignature] = []string{sig}
		}
		v := &Verifier{Secret: testKey, Now: func() time.Time { return time.Unix(now, 0) }}
		p, err := v.Verify(h, body)
		if err != nil {
			if p != nil {
				t.Fatal("payload with an error")
			}
			return
		}
		n, ok := parseTimestamp(ts)
		if !ok || sig != Sign(testKey, n, body) || p.ID == "" || p.Version != PayloadVersion {
			t.Fatalf("accepted ts %q sig %q body %q", ts, sig, body)
		}
	})
}
