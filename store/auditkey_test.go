package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The signer is made once and kept across reopens: a second Ensure never
// makes another key (witnesses pin the first).
func TestAuditSignerMadeOnce(t *testing.T) {
	d, path := openTemp(t)
	if _, err := d.AuditSigner(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fresh AuditSigner: %v", err)
	}
	calls := 0
	gen := func() (string, string, error) {
		calls++
		return "PRIVATE+KEY+coily/h+" + strings.Repeat("a", calls), "coily/h+vkey" + strings.Repeat("a", calls), nil
	}
	now := time.Date(2026, 10, 14, 12, 0, 0, 0, time.UTC)
	first, err := d.EnsureAuditSigner(gen, now)
	if err != nil {
		t.Fatal(err)
	}
	d = reopen(t, d, path)
	again, err := d.EnsureAuditSigner(gen, now.Add(time.Hour))
	if err != nil || again != first || calls != 1 {
		t.Fatalf("second Ensure = %+v, %v after %d generations; want %+v", again, err, calls, first)
	}
	if strings.Contains(first.String(), first.Key) {
		t.Fatalf("String shows the private key: %s", first)
	}
	putRaw(t, d, bucketState, keyAuditSigner, []byte(`{"key":"","verifier":"x"}`))
	if _, err := d.EnsureAuditSigner(gen, now); !errors.Is(err, ErrCorrupt) || calls != 1 {
		t.Fatalf("Ensure over an unreadable key = %v (%d generations): it must not be replaced", err, calls)
	}
}

func TestAuditCheckpointRoundTrip(t *testing.T) {
	d, path := openTemp(t)
	if _, err := d.AuditCheckpoint(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fresh AuditCheckpoint: %v", err)
	}
	want := AuditCheckpoint{Signed: []byte("coily/h\n1\nAAAA\n\n— coily/h sig\n"), At: time.Date(2026, 10, 14, 12, 0, 0, 0, time.UTC)}
	if err := d.SetAuditCheckpoint(want); err != nil {
		t.Fatal(err)
	}
	d = reopen(t, d, path)
	got, err := d.AuditCheckpoint()
	if err != nil || !bytes.Equal(got.Signed, want.Signed) || !got.At.Equal(want.At) {
		t.Fatalf("AuditCheckpoint = %+v, %v", got, err)
	}
	if err := d.SetAuditCheckpoint(AuditCheckpoint{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an empty checkpoint was written: %v", err)
	}
	putRaw(t, d, bucketState, keyAuditCheckpoint, []byte(`null`))
	if _, err := d.AuditCheckpoint(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a null checkpoint: %v", err)
	}
}
