package folder

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"

	"coily.dev/coily/atomicfile"
	"coily.dev/coily/descriptor"
)

// KeyFile is a sandbox's descriptor signing key as `coily key bootstrap`
// and `coily key rotate --out FILE` write it and the sandbox client reads
// it: one JSON object and a newline,
//
//	{"sandbox":"demo","key":"<64 lower-case hex digits>","generation":1}
//
// in a file of mode 0600.
type KeyFile struct {
	Sandbox    string
	Key        []byte // descriptor.KeySize bytes
	Generation int
}

// String names the key without showing it, so a KeyFile printed by
// mistake (%v, %s, a log line) leaks nothing.
func (k KeyFile) String() string {
	return fmt.Sprintf("key for sandbox %q (generation %d)", k.Sandbox, k.Generation)
}

// GoString is String for %#v.
func (k KeyFile) GoString() string { return "folder.KeyFile{" + k.String() + "}" }

// maxKeyFile bounds what ReadKeyFile reads: a valid file is under 200
// bytes.
const maxKeyFile = 4096

// keyHexRE is the key's form in the file.
var keyHexRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

type keyFileJSON struct {
	Sandbox    string `json:"sandbox"`
	Key        string `json:"key"`
	Generation int    `json:"generation"`
}

// check applies the rules both reading and writing enforce.
func (k KeyFile) check() error {
	switch {
	case !descriptor.SandboxNamePattern.MatchString(k.Sandbox):
		return fmt.Errorf("sandbox name must match %s", descriptor.SandboxNamePattern)
	case len(k.Key) != descriptor.KeySize:
		return fmt.Errorf("key must be %d bytes", descriptor.KeySize)
	case k.Generation < 1:
		return errors.New("generation must be at least 1")
	}
	return nil
}

// encodeKeyFile returns the file's bytes.
func encodeKeyFile(k KeyFile) ([]byte, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	out, err := json.Marshal(keyFileJSON{Sandbox: k.Sandbox, Key: hex.EncodeToString(k.Key), Generation: k.Generation})
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// WriteKeyFile writes k to path atomically: a temporary file of mode 0600
// in the same directory, synced, then renamed over path. It refuses a path
// that is a symbolic link or anything but a regular file, and a KeyFile
// that ReadKeyFile would refuse.
func WriteKeyFile(path string, k KeyFile) error {
	data, err := encodeKeyFile(k)
	if err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	if err := CheckKeyFileTarget(path); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	// CreateTemp already uses 0600; say so explicitly in case that changes.
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	// A symbolic link put at path since the check is replaced, not
	// followed: rename never writes through a link.
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("client: key file: %w", err)
	}
	ok = true
	_ = atomicfile.SyncDir(dir) // where the system allows it
	return nil
}

// CheckKeyFileTarget reports whether WriteKeyFile could write path: its
// directory exists and path is not a symbolic link, a directory or another
// non-regular file. `coily key` checks it before asking for a key that
// would otherwise be lost.
func CheckKeyFileTarget(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		dir := filepath.Dir(path)
		di, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("client: key file %s: %w", path, err)
		}
		if !di.IsDir() {
			return fmt.Errorf("client: key file %s: %s is not a directory", path, dir)
		}
		return nil
	case err != nil:
		return fmt.Errorf("client: key file %s: %w", path, err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("client: key file %s is a symbolic link; refusing to replace it", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("client: key file %s is not a regular file", path)
	}
	return nil
}

// ReadKeyFile reads a key file strictly: a regular file, not a symbolic
// link (the last component is opened with O_NOFOLLOW, and O_NONBLOCK so a
// FIFO never blocks), with exactly the three members, each once, a sandbox name matching descriptor.SandboxNamePattern, a key of 64
// lower-case hex digits (32 bytes), a generation of at least 1, nothing
// after the object but white space. A file that group or others may
// access in any way (mode & 077) is refused, as ssh refuses such a private
// key; the error says to chmod 600 it. Errors never show the key.
func ReadKeyFile(path string) (KeyFile, error) {
	var k KeyFile
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) { // EMLINK: FreeBSD
		return k, fmt.Errorf("client: key file %s is a symbolic link; give the file itself", path)
	}
	if err != nil {
		return k, fmt.Errorf("client: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return k, fmt.Errorf("client: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return k, fmt.Errorf("client: key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return k, fmt.Errorf("client: key file %s has mode %04o, open to group or others; chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return k, fmt.Errorf("client: key file: %w", err)
	}
	if len(data) > maxKeyFile {
		return k, fmt.Errorf("client: key file %s: larger than %d bytes", path, maxKeyFile)
	}
	k, err = decodeKeyFile(data)
	if err != nil {
		return KeyFile{}, fmt.Errorf("client: key file %s: %w", path, err)
	}
	return k, nil
}

// decodeKeyFile parses a key file's bytes. Its errors never quote the
// file.
func decodeKeyFile(data []byte) (KeyFile, error) {
	if err := checkMembers(data); err != nil {
		return KeyFile{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw keyFileJSON
	if err := dec.Decode(&raw); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return KeyFile{}, fmt.Errorf("member %q has the wrong type", ute.Field)
		}
		return KeyFile{}, errors.New("not a key file (malformed JSON or unknown member)")
	}
	if _, err := dec.Token(); err != io.EOF {
		return KeyFile{}, errors.New("data after the JSON object")
	}
	if !keyHexRE().MatchString(raw.Key) {
		return KeyFile{}, fmt.Errorf("key must be %d lower-case hex digits (%d bytes)", 2*descriptor.KeySize, descriptor.KeySize)
	}
	key, err := hex.DecodeString(raw.Key)
	if err != nil { // cannot happen after the pattern
		return KeyFile{}, errors.New("key is not hex")
	}
	k := KeyFile{Sandbox: raw.Sandbox, Key: key, Generation: raw.Generation}
	if err := k.check(); err != nil {
		return KeyFile{}, err
	}
	return k, nil
}

// checkMembers checks that data is one JSON object whose members are
// exactly sandbox, key and generation, each once (encoding/json would let
// a second "key" silently win).
func checkMembers(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return errors.New("malformed JSON")
		}
		name, _ := t.(string)
		switch name {
		case "sandbox", "key", "generation":
		default:
			return fmt.Errorf("unknown member %q", truncate(name, 32))
		}
		if seen[name] {
			return fmt.Errorf("member %q given twice", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return errors.New("malformed JSON")
		}
	}
	for _, name := range []string{"sandbox", "key", "generation"} {
		if !seen[name] {
			return fmt.Errorf("member %q missing", name)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
