package server

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

// RefusedWorkspace is a workspace the server refuses, and why.
type RefusedWorkspace struct {
	Workspace string    `json:"workspace"`
	Root      string    `json:"root"`
	Request   string    `json:"request"` // the command after which it could not be checked
	Since     time.Time `json:"since"`
	Reasons   []string  `json:"reasons"`
	// RepairedBy and Repaired are set by the repair.
	RepairedBy string    `json:"repaired_by,omitempty"`
	Repaired   time.Time `json:"repaired,omitempty"`
}

// Suffixes of the files in WorkspacesDir.
const (
	refusedSuffix  = ".refused"
	repairedSuffix = ".repaired"
)

// WorkspacesDir is where a state directory keeps refused workspaces.
func WorkspacesDir(stateDir string) string { return filepath.Join(stateDir, "workspaces") }

// workspaceFile is the refusal file of the workspace at root.
func workspaceFile(stateDir, root, suffix string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(WorkspacesDir(stateDir), hex.EncodeToString(sum[:12])+suffix)
}

// RefuseWorkspace records the refusal of a workspace, durably.
func RefuseWorkspace(stateDir string, w RefusedWorkspace) error {
	if stateDir == "" {
		return errors.New("no state directory to keep the refusal in")
	}
	if err := os.MkdirAll(WorkspacesDir(stateDir), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return err
	}
	return writeDurably(workspaceFile(stateDir, w.Root, refusedSuffix), append(data, '\n'))
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

// workspaceRefusal reads the refusal of the workspace at root, if any.
func workspaceRefusal(stateDir, root, suffix string) (RefusedWorkspace, bool, error) {
	var w RefusedWorkspace
	if stateDir == "" {
		return w, false, nil
	}
	data, err := os.ReadFile(workspaceFile(stateDir, root, suffix))
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

// RefusedWorkspaces lists the refused workspaces of a state directory.
func RefusedWorkspaces(stateDir string) ([]RefusedWorkspace, error) {
	paths, err := filepath.Glob(filepath.Join(WorkspacesDir(stateDir), "*"+refusedSuffix))
	if err != nil {
		return nil, err
	}
	var out []RefusedWorkspace
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var w RefusedWorkspace
		if err := json.Unmarshal(data, &w); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// RepairWorkspace lifts the refusal of w (as read by RefusedWorkspaces):
// the repair record is written first, then the refusal removed, so the
// server audits the repair with the next command in the workspace.
func RepairWorkspace(stateDir string, w RefusedWorkspace, by string, now time.Time) error {
	w.RepairedBy, w.Repaired = by, now
	data, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return err
	}
	if err := writeDurably(workspaceFile(stateDir, w.Root, repairedSuffix), append(data, '\n')); err != nil {
		return err
	}
	return os.Remove(workspaceFile(stateDir, w.Root, refusedSuffix))
}
