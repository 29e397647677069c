package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// A workspace the check after a command could not cover (something it
// could not read, move aside or restore, a scan out of its budget) may
// hold what the command planted. The server refuses it, for the rules
// that use it only, until its owner has looked and run `coily workspace
// repair NAME` on the trust point. The refusal is a file in the state
// directory, so it survives restarts; the repair replaces it with a
// record the server audits at the next command in the workspace.

// Refused is a workspace the server refuses, and why.
type Refused struct {
	Workspace string    `json:"workspace"`
	Root      string    `json:"root"`
	Request   string    `json:"request"` // the command after which it could not be checked
	Since     time.Time `json:"since"`
	Reasons   []string  `json:"reasons"`
	// RepairedBy and Repaired are set by the repair.
	RepairedBy string    `json:"repaired_by,omitempty"`
	Repaired   time.Time `json:"repaired,omitempty"`
}

// Suffixes of the files in RefusalsDir.
const (
	refusedSuffix  = ".refused"
	repairedSuffix = ".repaired"
)

// RefusalsDir is where a state directory keeps refused workspaces.
func RefusalsDir(stateDir string) string { return filepath.Join(stateDir, "workspaces") }

// refusalFile is the refusal file of the workspace at root.
func refusalFile(stateDir, root, suffix string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(RefusalsDir(stateDir), hex.EncodeToString(sum[:12])+suffix)
}

// Refuse records the refusal of a workspace, durably.
func Refuse(stateDir string, w Refused) error {
	if stateDir == "" {
		return errors.New("no state directory to keep the refusal in")
	}
	if err := os.MkdirAll(RefusalsDir(stateDir), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return err
	}
	return writeDurably(refusalFile(stateDir, w.Root, refusedSuffix), append(data, '\n'))
}

// writeDurably writes path through a temporary file, synced, renamed.
func writeDurably(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// readRefusal reads the refusal of the workspace at root, if any.
func readRefusal(stateDir, root, suffix string) (Refused, bool, error) {
	var w Refused
	if stateDir == "" {
		return w, false, nil
	}
	data, err := os.ReadFile(refusalFile(stateDir, root, suffix))
	if errors.Is(err, fs.ErrNotExist) {
		return w, false, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &w)
	}
	if err != nil {
		return w, true, fmt.Errorf("refused workspace record: %w", err) // unreadable: still refused
	}
	return w, true, nil
}

// ListRefused lists the refused workspaces of a state directory.
func ListRefused(stateDir string) ([]Refused, error) {
	paths, err := filepath.Glob(filepath.Join(RefusalsDir(stateDir), "*"+refusedSuffix))
	if err != nil {
		return nil, err
	}
	var out []Refused
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var w Refused
		if err := json.Unmarshal(data, &w); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// Repair lifts the refusal of w (as read by ListRefused): the repair
// record is written first, then the refusal removed, so the server audits
// the repair with the next command in the workspace.
func Repair(stateDir string, w Refused, by string, now time.Time) error {
	w.RepairedBy, w.Repaired = by, now
	data, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return err
	}
	if err := writeDurably(refusalFile(stateDir, w.Root, repairedSuffix), append(data, '\n')); err != nil {
		return err
	}
	return os.Remove(refusalFile(stateDir, w.Root, refusedSuffix))
}
