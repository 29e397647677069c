package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coily.dev/coily/store"
)

// sealKey encrypts k's secret for storage: the stored Secret is the GCM
// nonce followed by the ciphertext, bound (as additional data) to the
// sandbox and the generation, so a sealed secret copied to another
// sandbox's record, or an older generation's put back, does not open.
func (s *Store) sealKey(k store.Key) store.Key {
	if s.seal == nil {
		panic(errNoSeal) // every caller checks s.seal first
	}
	nonce := make([]byte, s.seal.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail
	}
	out := k
	out.Secret = s.seal.Seal(nonce, nonce, k.Secret, keyAAD(k))
	return out
}

func (s *Store) openKey(key string, k store.Key) (store.Key, error) {
	if s.seal == nil {
		return store.Key{}, errNoSeal
	}
	n := s.seal.NonceSize()
	if len(k.Secret) < n+s.seal.Overhead() {
		return store.Key{}, fmt.Errorf("%w: %s: sealed secret too short", store.ErrCorrupt, key)
	}
	secret, err := s.seal.Open(nil, k.Secret[:n], k.Secret[n:], keyAAD(k))
	if err != nil {
		return store.Key{}, fmt.Errorf("%w: %s: the secret does not unseal (another seal key, or not this sandbox's)", store.ErrCorrupt, key)
	}
	k.Secret = secret
	return k, nil
}

func keyAAD(k store.Key) []byte {
	aad := binary.BigEndian.AppendUint64([]byte("coily sandbox key\x00"), uint64(k.Generation))
	return append(aad, k.Sandbox...)
}

// decodeKey reads and unseals the record under key, which must name the
// sandbox its record names.
func (s *Store) decodeKey(kv *mvccpb.KeyValue) (store.Key, error) {
	key := string(kv.Key)
	var k store.Key
	if err := decode(key, kv.Value, &k); err != nil {
		return store.Key{}, err
	}
	sb, err := unname(s.prefix+dirKeys, key)
	if err != nil {
		return store.Key{}, err
	}
	if k.Sandbox != sb {
		return store.Key{}, fmt.Errorf("%w: %s: record names sandbox %q", store.ErrCorrupt, key, k.Sandbox)
	}
	return s.openKey(key, k)
}

// Key reads a sandbox's current key; ErrNotFound when it has none.
func (s *Store) Key(sandbox string) (store.Key, error) {
	k, err := s.key(dirKeys, "sandbox", sandbox)
	if err != nil {
		return store.Key{}, err
	}
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return store.Key{}, s.fail("key "+sandbox, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Key{}, fmt.Errorf("etcdstore: key %s: %w", sandbox, store.ErrNotFound)
	}
	return s.decodeKey(resp.Kvs[0])
}

// Keys lists every sandbox's current key, by sandbox.
func (s *Store) Keys() ([]store.Key, error) {
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+dirKeys, clientv3.WithPrefix())
	if err != nil {
		return nil, s.fail("keys", err)
	}
	var keys []store.Key
	for _, kv := range resp.Kvs {
		k, err := s.decodeKey(kv)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b store.Key) int { return strings.Compare(a.Sandbox, b.Sandbox) })
	return keys, nil
}

// IssueKey stores the first key of a sandbox, in one transaction with the
// check that it has none (store.ErrKeyExists otherwise): of several hosts
// issuing at once, one wins.
func (s *Store) IssueKey(sandbox string, secret []byte, now time.Time) (store.Key, error) {
	if s.seal == nil {
		return store.Key{}, errNoSeal
	}
	k, err := s.key(dirKeys, "sandbox", sandbox)
	if err != nil {
		return store.Key{}, err
	}
	issued := store.Key{Sandbox: sandbox, Secret: secret, Created: now, Generation: 1}
	v, err := encode(k, s.sealKey(issued))
	if err != nil {
		return store.Key{}, err
	}
	ctx, cancel := s.call(context.Background())
	defer cancel()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, v)).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return store.Key{}, s.fail("issue key "+sandbox, err)
	}
	if resp.Succeeded {
		return issued, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if _, err := s.decodeKey(kvs[0]); err != nil {
			return store.Key{}, fmt.Errorf("etcdstore: issue key %s: %w", sandbox, err)
		}
	}
	return store.Key{}, fmt.Errorf("etcdstore: issue key %s: %w", sandbox, store.ErrKeyExists)
}

// ReplaceKeys stores new keys for the named sandboxes in one transaction,
// each with its generation advanced past the key it read, guarded by what
// it read: a key replaced meanwhile makes it read and decide again.
// secret returns the new key material for a sandbox.
func (s *Store) ReplaceKeys(sandboxes []string, secret func(sandbox string) ([]byte, error), now time.Time) ([]store.Key, error) {
	if s.seal == nil {
		return nil, errNoSeal
	}
	names := make([]string, len(sandboxes))
	for i, sb := range sandboxes {
		k, err := s.key(dirKeys, "sandbox", sb)
		if err != nil {
			return nil, err
		}
		if slices.Contains(names[:i], k) {
			return nil, fmt.Errorf("etcdstore: replace keys: sandbox %q named twice", sb)
		}
		names[i] = k
	}
	var out []store.Key
	err := s.retry("replace keys", func(ctx context.Context) error {
		out = nil
		var reads []clientv3.Op
		for _, k := range names {
			reads = append(reads, clientv3.OpGet(k))
		}
		cur, err := s.cli.Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return err
		}
		var conds []clientv3.Cmp
		var puts []clientv3.Op
		for i, k := range names {
			var old store.Key
			rev := int64(0)
			if kvs := cur.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
				if old, err = s.decodeKey(kvs[0]); err != nil {
					return err
				}
				rev = kvs[0].ModRevision
			}
			sec, err := secret(sandboxes[i])
			if err != nil {
				return err
			}
			nk := store.Key{Sandbox: sandboxes[i], Secret: sec, Created: now, Generation: old.Generation + 1}
			v, err := encode(k, s.sealKey(nk))
			if err != nil {
				return err
			}
			conds = append(conds, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
			puts = append(puts, clientv3.OpPut(k, v))
			out = append(out, nk)
		}
		resp, err := s.cli.Txn(ctx).If(conds...).Then(puts...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errConflict
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
