package witness

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestUnsignedRefusalIsAnOutage: whoever answers at a witness's address
// (a proxy, a spoofer on plain http) and refuses a checkpoint without a
// checkpoint signed by the log's key and cosigned by the pinned witness
// key that proves it is not believed: an *UnprovenError, not Refused.
func TestUnsignedRefusalIsAnOutage(t *testing.T) {
	l := newMemLog(t, "coily/a")
	_, wkey := newWitness(t, t.TempDir(), l)
	liar := newMemLog(t, "coily/a") // signs as the log, with another key
	// A cosigned checkpoint by another witness key.
	other, _ := newWitness(t, t.TempDir(), l)
	if _, err := other.Add(AddRequest{Checkpoint: l.sign(t, 50)}.Format()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, ctype, body string
		status            int
		latest            []byte // what GET /checkpoint/coily/a answers (nil: 404)
	}{
		{"409 sized larger", SizeType, "1000\n", http.StatusConflict, nil},
		{"bare 409", "text/plain", "no", http.StatusConflict, nil},
		{"422", "text/plain", "no", http.StatusUnprocessableEntity, nil},
		{"403", "text/plain", "not signed", http.StatusForbidden, nil},
		{"409 larger, an uncosigned checkpoint", SizeType, "1000\n", http.StatusConflict, l.sign(t, 1000)},
		{"409 larger, cosigned by another witness", SizeType, "1000\n", http.StatusConflict, other.Latest("coily/a")},
		{"403, a checkpoint signed by another key, not cosigned", "text/plain", "no", http.StatusForbidden, liar.sign(t, 1000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					if tc.latest == nil {
						http.NotFound(w, r)
						return
					}
					_, _ = w.Write(tc.latest)
					return
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c := &Client{URL: srv.URL, Key: wkey, LogKey: l.vkey, Prove: l.prove}
			_, err := c.Add(context.Background(), l.sign(t, 20))
			var unproven *UnprovenError
			if !errors.As(err, &unproven) || Refused(err) {
				t.Fatalf("got %v, want an UnprovenError", err)
			}
		})
	}
}

// TestReplacedLogKeyIsRefused: a witness that holds a checkpoint it
// cosigned of the log's origin, signed by the log's former key, refuses
// the new key's checkpoint (403): proof the log's key was replaced (its
// state file wiped).
func TestReplacedLogKeyIsRefused(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, wkey := newWitness(t, t.TempDir(), l)
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx := context.Background()
	if _, err := (&Client{URL: srv.URL, Key: wkey, LogKey: l.vkey, Prove: l.prove}).Add(ctx, l.sign(t, 30)); err != nil {
		t.Fatal(err)
	}
	fresh := newMemLog(t, "coily/a")
	_, err := (&Client{URL: srv.URL, Key: wkey, LogKey: fresh.vkey, Prove: fresh.prove}).Add(ctx, fresh.sign(t, 3))
	var repl *ReplacedError
	if !errors.As(err, &repl) || !Refused(err) || repl.Witness != 30 {
		t.Fatalf("got %v, want a ReplacedError at 30", err)
	}
}
