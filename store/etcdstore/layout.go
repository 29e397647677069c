package etcdstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"coily.dev/coily/store"
)

// Names below the prefix (the package comment has the whole layout).
const (
	keyLockout   = "stops/lockout"
	keyPause     = "stops/pause"
	dirSelfPause = "stops/pause.self/"
	dirStops     = "stops/"
	dirRates     = "rates/"
	dirKeys      = "keys/"
	dirRelays    = "relays/"
	dirNonces    = "nonces/"
	dirLeases    = "leases/"
	dirSlots     = "slots/"
	keySlotGuard = "slots/guard"
	dirHeld      = "slots/held/"
	dirApprovals = "approvals/"
)

// name is one component of a key: path-escaped, so that it holds no "/"
// and two different names never make one key. An empty name is refused
// (it would name the directory itself).
func name(what, s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("etcdstore: empty %s", what)
	}
	return url.PathEscape(s), nil
}

// unname is name's inverse, for a key listed under dir.
func unname(dir, key string) (string, error) {
	rest, ok := strings.CutPrefix(key, dir)
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", fmt.Errorf("%w: key %q is not one name under %s", store.ErrCorrupt, key, dir)
	}
	n, err := url.PathUnescape(rest)
	if err != nil || url.PathEscape(n) != rest {
		return "", fmt.Errorf("%w: key %q is not one name under %s", store.ErrCorrupt, key, dir)
	}
	return n, nil
}

// key is the full key of name n under dir.
func (s *Store) key(dir, what, n string) (string, error) {
	e, err := name(what, n)
	if err != nil {
		return "", err
	}
	return s.prefix + dir + e, nil
}

// decode reads a JSON value as store's getJSON does: JSON null (which
// decodes without error into a zero value, e.g. an inactive stop) and
// anything unreadable are ErrCorrupt.
func decode(key string, data []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return fmt.Errorf("%w: %s: null record", store.ErrCorrupt, key)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %v", store.ErrCorrupt, key, err)
	}
	return nil
}

func encode(key string, v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("etcdstore: encode %s: %w", key, err)
	}
	return string(data), nil
}

// errConflict reports a transaction whose compare failed: what it read
// changed before it wrote. The caller reads again.
var errConflict = errors.New("etcdstore: changed meanwhile")
