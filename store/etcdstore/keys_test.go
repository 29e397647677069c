package etcdstore_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
	"coily.dev/coily/store/etcdstore"
)

func secret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

func TestKeys(t *testing.T) {
	h := threeHosts(t)
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	sec := secret()
	k, err := h[0].IssueKey("sb/1", sec, now)
	if err != nil || k.Generation != 1 || !bytes.Equal(k.Secret, sec) {
		t.Fatalf("IssueKey: %+v, %v", k, err)
	}
	_, err = h[1].IssueKey("sb/1", secret(), now)
	wantErr(t, err, store.ErrKeyExists)
	got, err := h[2].Key("sb/1")
	if err != nil || !bytes.Equal(got.Secret, sec) || got.Generation != 1 || !got.Created.Equal(now) {
		t.Fatalf("Key: %+v, %v", got, err)
	}
	_, err = h[2].Key("sb")
	wantErr(t, err, store.ErrNotFound)
	if _, err := h[0].IssueKey("sb", secret(), now); err != nil {
		t.Fatal(err)
	}
	fresh := map[string][]byte{"sb": secret(), "sb/1": secret(), "new": secret()}
	out, err := h[1].ReplaceKeys([]string{"sb", "sb/1", "new"}, func(sb string) ([]byte, error) { return fresh[sb], nil }, now)
	if err != nil || len(out) != 3 || out[0].Generation != 2 || out[1].Generation != 2 || out[2].Generation != 1 {
		t.Fatalf("ReplaceKeys: %+v, %v", out, err)
	}
	keys, err := h[2].Keys()
	if err != nil || len(keys) != 3 {
		t.Fatalf("Keys: %d, %v", len(keys), err)
	}
	for _, k := range keys {
		if !bytes.Equal(k.Secret, fresh[k.Sandbox]) {
			t.Errorf("key %s: not the replaced secret", k.Sandbox)
		}
	}
	if _, err := h[1].ReplaceKeys([]string{"sb", "sb"}, func(string) ([]byte, error) { return secret(), nil }, now); err == nil {
		t.Error("ReplaceKeys named one sandbox twice and wrote")
	}
	boom := errors.New("no entropy")
	if _, err := h[1].ReplaceKeys([]string{"sb"}, func(string) ([]byte, error) { return nil, boom }, now); !errors.Is(err, boom) {
		t.Errorf("ReplaceKeys with a failing secret: %v", err)
	}
	if k, _ := h[0].Key("sb"); k.Generation != 2 {
		t.Errorf("a failed ReplaceKeys wrote: generation %d", k.Generation)
	}
	if _, err := h[0].IssueKey("", secret(), now); err == nil {
		t.Error("a key without a sandbox was issued")
	}
}

// TestKeySealed: etcd never holds a sandbox's secret in clear, a sealed
// secret moved to another sandbox's record does not open, and another
// seal key opens nothing.
func TestKeySealed(t *testing.T) {
	s := open(t)
	sec := secret()
	if _, err := s.IssueKey("a", sec, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssueKey("b", secret(), time.Now()); err != nil {
		t.Fatal(err)
	}
	all := get(t, prefix(t), clientv3.WithPrefix())
	for _, kv := range all.Kvs {
		if bytes.Contains(kv.Value, sec) || bytes.Contains(kv.Value, []byte(fmt.Sprintf("%q", sec))) {
			t.Fatalf("%s holds the secret in clear", kv.Key)
		}
		var k store.Key
		json.Unmarshal(kv.Value, &k)
		if bytes.Contains(k.Secret, sec) {
			t.Fatalf("%s holds the secret in clear (base64)", kv.Key)
		}
	}

	// b's record with a's sealed secret: refused.
	a := get(t, prefix(t)+"keys/a").Kvs[0].Value
	var rec store.Key
	if err := json.Unmarshal(a, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Sandbox = "b"
	moved, _ := json.Marshal(rec)
	put(t, prefix(t)+"keys/b", string(moved))
	_, err := s.Key("b")
	wantErr(t, err, store.ErrCorrupt)
	_, err = s.Keys()
	wantErr(t, err, store.ErrCorrupt)
	// A record naming another sandbox than its key: refused.
	put(t, prefix(t)+"keys/c", string(a))
	_, err = s.Key("c")
	wantErr(t, err, store.ErrCorrupt)

	other := openCfg(t, etcdstore.Config{SealKey: secret()})
	_, err = other.Key("a")
	wantErr(t, err, store.ErrCorrupt)
}

// TestIssueKeyOnce: hosts issuing a sandbox's first key at once: one wins,
// the others get ErrKeyExists, and the stored key is the winner's.
func TestIssueKeyOnce(t *testing.T) {
	h := threeHosts(t)
	for round := range 10 {
		sb := fmt.Sprintf("sb%d", round)
		var mu sync.Mutex
		var won [][]byte
		var wg sync.WaitGroup
		for _, s := range h {
			for range 3 {
				wg.Go(func() {
					sec := secret()
					_, err := s.IssueKey(sb, sec, time.Now())
					switch {
					case err == nil:
						mu.Lock()
						won = append(won, sec)
						mu.Unlock()
					case !errors.Is(err, store.ErrKeyExists):
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%s: %d issues won, want 1", sb, len(won))
		}
		if k, err := h[0].Key(sb); err != nil || !bytes.Equal(k.Secret, won[0]) {
			t.Fatalf("%s: stored key is not the winner's (%v)", sb, err)
		}
	}
}
