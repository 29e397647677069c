package client

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"coily.dev/coily/regularfile"
)

// stickyPath is the file that keeps which of targets answered last: in
// the user's cache directory, named by a hash of the list, so that two
// lists never share one. "" when there is no cache directory.
func stickyPath(targets []Target) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	var names []string
	for _, t := range targets {
		names = append(names, t.Name)
	}
	sum := sha256.Sum256([]byte(strings.Join(names, "\x00")))
	return filepath.Join(dir, "coily", "server-"+hex.EncodeToString(sum[:8]))
}

// maxSticky bounds the file: a name and a newline.
const maxSticky = 1 << 10

// loadSticky is the index in names of the server the file at path names:
// 0 (the first) when there is no file, or it names none of them
// (whatever it holds, it only chooses among names).
func loadSticky(path string, names []string) int {
	if path == "" {
		return 0
	}
	data, err := regularfile.Read(path, maxSticky)
	if err != nil {
		return 0
	}
	return max(0, slices.Index(names, strings.TrimSuffix(string(data), "\n")))
}

// saveSticky writes name to the file at path, as well as it can: a
// client that cannot remember starts from the first server next time.
func saveSticky(path, name string) {
	if path == "" {
		return
	}
	if os.MkdirAll(filepath.Dir(path), 0o700) != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".server-*")
	if err != nil {
		return
	}
	_, werr := f.WriteString(name + "\n")
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(f.Name(), path) != nil {
		_ = os.Remove(f.Name())
	}
}
