package witness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"coily.dev/coily/audit"
)

// StateFile is the witness's state in its directory: per log, the latest
// checkpoint it cosigned.
const StateFile = "witness.state"

// KeyFile is the witness's private cosigning key in its directory (0600).
const KeyFile = "witness.key"

// entry is what the witness holds for one log.
type entry struct {
	audit.Tree
	Signed []byte // the checkpoint, the log's signature and the cosignature
}

// state is origin -> entry.
type state map[string]entry

// stateFile is the file's form: the signed checkpoints only (the tree is
// read back from them).
type stateFile struct {
	Logs map[string]string `json:"logs"` // origin -> signed, cosigned checkpoint
}

func loadState(dir string) (state, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return state{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("witness: state: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("witness: state %s: %w", filepath.Join(dir, StateFile), err)
	}
	st := state{}
	for o, signed := range f.Logs {
		text, _, ok := splitNote([]byte(signed))
		if !ok {
			return nil, fmt.Errorf("witness: state: %s: not a signed note", o)
		}
		c, err := audit.ParseCheckpoint(text)
		if err != nil || c.Origin != o {
			return nil, fmt.Errorf("witness: state: %s: %v", o, err)
		}
		st[o] = entry{Tree: c.Tree, Signed: []byte(signed)}
	}
	return st, nil
}

// put keeps e for origin: the whole state written to a new file, fsynced,
// renamed over the old, and the directory fsynced, before it is used.
func (st state) put(dir, origin string, e entry) error {
	f := stateFile{Logs: map[string]string{origin: string(e.Signed)}}
	for o, old := range st {
		if o != origin {
			f.Logs[o] = string(old.Signed)
		}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("witness: state: %w", err)
	}
	if err := writeAtomic(dir, StateFile, b, 0o600); err != nil {
		return err
	}
	st[origin] = e
	return nil
}

func writeAtomic(dir, name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("witness: %s: %w", name, err)
	}
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("witness: %s: %w", name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("witness: %s: %w", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("witness: %s: %w", name, err)
	}
	return nil
}

// EnsureKey returns the private key in dir's KeyFile, making it (named
// name, 0600) when there is none.
func EnsureKey(dir, name string) (string, error) {
	path := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		skey := string(trimNL(b))
		if _, err := cosigner(skey); err != nil {
			return "", fmt.Errorf("witness: %s: %w", path, err)
		}
		return skey, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("witness: key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("witness: key: %w", err)
	}
	skey, _, err := GenerateKey(name)
	if err != nil {
		return "", err
	}
	if err := writeAtomic(dir, KeyFile, []byte(skey+"\n"), 0o600); err != nil {
		return "", err
	}
	return skey, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// cosigner is the cosignature/v1 signer of skey.
func cosigner(skey string) (note.Signer, error) {
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		return nil, fmt.Errorf("witness: key: %w", err)
	}
	return s, nil
}

// Forget drops what the witness in dir holds for origin (the witness
// stopped): its next checkpoint of that log is cosigned as a first one.
// It is the owner's repair once a log's lost records are accounted for;
// it returns the tree forgotten.
func Forget(dir, origin string) (audit.Tree, error) {
	lock, err := lockState(dir)
	if err != nil {
		return audit.Tree{}, err
	}
	defer lock.Close()
	st, err := loadState(dir)
	if err != nil {
		return audit.Tree{}, err
	}
	e, ok := st[origin]
	if !ok {
		return audit.Tree{}, fmt.Errorf("witness: %s holds no checkpoint of %s", dir, origin)
	}
	delete(st, origin)
	f := stateFile{Logs: map[string]string{}}
	for o, old := range st {
		f.Logs[o] = string(old.Signed)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return audit.Tree{}, fmt.Errorf("witness: state: %w", err)
	}
	return e.Tree, writeAtomic(dir, StateFile, b, 0o600)
}
