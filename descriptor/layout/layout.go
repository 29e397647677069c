// Package layout is the shape of a shared folder (a "mount") of coily's
// filesystem protocol (docs/protocol.md): its directories, the names of
// the files in them, and the largest response file. It links nothing
// beyond the standard library, so a client that only needs the shape (the
// general client's bound on a relayed answer) links no parser; package
// descriptor, which reads and writes the files, uses these definitions.
package layout

import "path/filepath"

// The layout of a mount: everything lives under DirName, in four
// directories.
const (
	DirName = ".coily"
	// RequestsDir holds request descriptors, moved in whole by rename.
	RequestsDir = "requests"
	// ResponsesDir holds the bridge's answers, one per request id.
	ResponsesDir = "responses"
	// TeardownsDir holds teardowns, moved in whole by rename.
	TeardownsDir = "teardowns"
	// TmpDir is where writers prepare files before renaming them into
	// place; the bridge never reads it.
	TmpDir = "tmp"
)

// Dirs lists the directories under DirName.
var Dirs = []string{RequestsDir, ResponsesDir, TeardownsDir, TmpDir}

// MaxResponseSize is the largest response file accepted, in bytes.
const MaxResponseSize = 64 << 20

// FileName is the name of the file for request id in requests/, responses/
// or teardowns/.
func FileName(id string) string { return id + ".json" }

// Path joins a mount, one of the directories and a name.
func Path(mount, dir, name string) string { return filepath.Join(mount, DirName, dir, name) }
