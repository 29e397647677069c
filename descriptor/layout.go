package descriptor

import (
	"crypto/rand"
	"fmt"

	"coily.dev/coily/descriptor/layout"
)

// The layout of a shared folder (a "mount"): everything lives under
// DirName, in four directories (package layout defines them).
const (
	DirName      = layout.DirName
	RequestsDir  = layout.RequestsDir
	ResponsesDir = layout.ResponsesDir
	TeardownsDir = layout.TeardownsDir
	TmpDir       = layout.TmpDir
)

// Dirs lists the directories under DirName.
var Dirs = layout.Dirs

// namePattern is the file-name grammar of requests/, responses/ and
// teardowns/: the request id (a lower-case UUID) and an extension.
var namePattern = lazyRE(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(json|yaml)$`)

// IDFromName returns the request id a file name carries, or false when the
// name is outside the grammar.
func IDFromName(name string) (string, bool) {
	m := namePattern().FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// FileName is the name of the file for request id in requests/, responses/
// or teardowns/.
func FileName(id string) string { return layout.FileName(id) }

// Path joins a mount, one of the directories and a name.
func Path(mount, dir, name string) string { return layout.Path(mount, dir, name) }

// NewID returns a fresh request id: a random (version 4) UUID in lower
// case, as the file-name grammar wants.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
