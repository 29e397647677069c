package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"coily.dev/coily/atomicfile"
	"coily.dev/coily/regularfile"
)

// hostIDFile, in the state directory, holds the host's id: what proves to
// the shared state that a claim on the host's name left by a run killed
// before its lease expired is this host's own (etcdstore.ClaimHost). One
// state directory, one host: its lock keeps a second process out. A copied
// state directory shares the id: remove the file in the copy.
const hostIDFile = "host-id"

// hostID reads the host's id from dir, or makes one (32 hex digits, mode
// 0600, created exclusively) when there is none.
func hostID(dir string) (string, error) {
	path := filepath.Join(dir, hostIDFile)
	data, err := regularfile.Read(path, 128)
	if errors.Is(err, fs.ErrNotExist) {
		return newHostID(path)
	}
	if err != nil {
		return "", fmt.Errorf("host id: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if !validHostID(id) {
		return "", fmt.Errorf("host id %s: not 32 hex digits: remove it (a new one is made at the next start)", path)
	}
	return id, nil
}

// newHostID writes a new id whole or not at all, and never over another's
// id (atomicfile.Create): a crash leaves no empty host-id behind.
func newHostID(path string) (string, error) {
	b := make([]byte, 16)
	rand.Read(b)
	id := hex.EncodeToString(b)
	if err := atomicfile.Create(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("host id: %w", err)
	}
	return id, nil
}

func validHostID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}
