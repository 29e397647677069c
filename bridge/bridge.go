// Package bridge relays request files written by network-less sandboxes to
// the coily server and writes the answers back (docs/protocol.md).
//
// A mount is a folder shared with a sandbox. The sandbox writes signed
// request descriptors into Dir/.coily/requests/ and teardowns into
// Dir/.coily/teardowns/ (each prepared in tmp/ and renamed into place); the
// bridge relays each one through a Relayer and writes the answer to
// Dir/.coily/responses/<id>.json, which the sandbox reads and deletes.
//
// The sandbox controls every byte and every name under Dir/.coily, so the
// bridge treats the folder as hostile:
//
//   - it opens .coily and its four directories once, at start, refusing
//     symbolic links and non-directories, and does everything after that
//     relative to the descriptors it holds (openat, fstatat, renameat,
//     unlinkat): a directory swapped for a symbolic link later redirects
//     nothing;
//   - it relays only names in the protocol's grammar (descriptor.IDFromName)
//     and deletes every other name in requests/ and teardowns/ unopened;
//   - it never follows a symbolic link, never blocks on a FIFO, never reads
//     a device, a hard-linked file or a file larger than the protocol allows
//     (each gets a bad-request answer and is deleted);
//   - it writes answers to a fresh temporary file and renames it into place,
//     so a planted symbolic link is replaced, never written through;
//   - it never reads responses/ or tmp/, and never logs file contents.
//
// File-system events only wake the bridge; a periodic rescan of each
// directory is the backstop for missed events.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"coily.dev/coily/descriptor"
)

// Defaults for Config.
const (
	DefaultRescan      = 2 * time.Second
	DefaultMaxInFlight = 8
)

// Limits and timings of the protocol as the bridge applies them.
const (
	// MaxTeardownSize is the largest teardown file relayed.
	MaxTeardownSize = 64 << 10
	// minBackoff and maxBackoff bound the wait before a request whose
	// relay failed transiently is tried again.
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
	// staleTemp is the age after which a temporary file of the bridge's
	// own left in responses/ (by a crash) is removed at start.
	staleTemp = time.Minute
	// tempPrefix starts the names of the bridge's temporary files.
	tempPrefix = ".tmp-"
)

// Mount is a shared folder and the sandbox it belongs to.
type Mount struct {
	// Dir is the shared folder (trusted: given by the operator); its
	// protocol files live in Dir/.coily/.
	Dir string
	// Sandbox is the sandbox name the server knows the folder's writer by
	// (its signing key's name).
	Sandbox string
}

// Refusal is a definitive answer to a request in place of a response: the
// bridge writes it as a refused response. It implements error.
type Refusal struct {
	Code    string // a refusal code, e.g. "permission-denied"
	Message string // safe to show to the sandbox
	// AuditID is the server's audit record of the refusal, if any; the
	// refused response carries it.
	AuditID string
	// Held marks the refusal of a second request under an id another
	// request of the sandbox holds: it is not that id's answer, so the
	// bridge writes it nowhere and deletes the request file.
	Held bool
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// Relayer carries request and teardown files to the coily server.
type Relayer interface {
	// Relay returns the response file's bytes. An error that is a
	// *Refusal is definitive (the bridge writes a refused response with
	// it, unless it is Held); any other error is transient (the request
	// stays and is retried with backoff).
	Relay(ctx context.Context, sandbox, id string, request []byte) ([]byte, error)
	// Teardown relays a teardown file. It is deleted once relayed or
	// refused (a *Refusal); on any other error it stays and is retried
	// with backoff (the server refuses it as stale after its freshness
	// window).
	Teardown(ctx context.Context, sandbox, id string, teardown []byte) error
}

// Config configures Run.
type Config struct {
	Mounts  []Mount
	Relayer Relayer
	// Logger receives every refusal, deletion and failure (never file
	// contents); nil means slog.Default().
	Logger *slog.Logger
	// Rescan is how often each directory is listed in full, whatever the
	// file-system events say (default DefaultRescan).
	Rescan time.Duration
	// MaxInFlight bounds the requests relayed at once per mount (default
	// DefaultMaxInFlight); teardowns have an allowance of their own, so
	// that they are never stuck behind the requests they cancel.
	MaxInFlight int
}

// Run serves the mounts until ctx ends, then returns nil once every
// goroutine it started has stopped. It first opens every mount (creating
// .coily and its directories, mode 0700, when missing) and returns an error
// without serving any when one cannot be opened safely: .coily or one of
// its directories is a symbolic link or not a directory, or two mounts are
// the same folder.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Relayer == nil {
		return errors.New("bridge: no Relayer")
	}
	if len(cfg.Mounts) == 0 {
		return errors.New("bridge: no mounts")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = DefaultRescan
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	var mounts []*mount
	defer func() {
		for _, m := range mounts {
			m.close()
		}
	}()
	seen := map[fileID]string{}
	for _, mt := range cfg.Mounts {
		if mt.Sandbox == "" {
			return fmt.Errorf("bridge: mount %s: no sandbox name", mt.Dir)
		}
		abs, err := filepath.Abs(mt.Dir)
		if err != nil {
			return fmt.Errorf("bridge: mount %s: %w", mt.Dir, err)
		}
		mt.Dir = abs
		m, err := openMount(mt)
		if err != nil {
			return fmt.Errorf("bridge: mount %s: %w", mt.Dir, err)
		}
		mounts = append(mounts, m)
		if other, dup := seen[m.coilyID]; dup {
			return fmt.Errorf("bridge: mount %s: same folder as mount %s", mt.Dir, other)
		}
		seen[m.coilyID] = mt.Dir
		m.log = cfg.Logger.With("mount", mt.Dir, "sandbox", mt.Sandbox)
		m.relayer, m.rescan, m.maxInFlight = cfg.Relayer, cfg.Rescan, cfg.MaxInFlight
	}
	var wg sync.WaitGroup
	for _, m := range mounts {
		wg.Go(func() { m.serve(ctx) })
	}
	wg.Wait()
	return nil
}

// mount is an open mount. Its directory descriptors are the only way the
// bridge reaches the folder's files.
type mount struct {
	Mount
	log         *slog.Logger
	relayer     Relayer
	rescan      time.Duration
	maxInFlight int

	coilyFd int     // Dir/.coily
	coilyID fileID  // what coilyFd is
	dirs    [2]*dir // requests/, teardowns/
	respFd  int     // responses/
}

// dir is requests/ or teardowns/.
type dir struct {
	name string // descriptor.RequestsDir or descriptor.TeardownsDir
	path string // for the watcher and the log only
	fd   int
	id   fileID
}

func (m *mount) close() {
	for _, fd := range []int{m.coilyFd, m.respFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	for _, d := range m.dirs {
		if d != nil && d.fd >= 0 {
			unix.Close(d.fd)
		}
	}
}

// openMount opens Dir/.coily and its directories, creating what is
// missing, and keeps descriptors to requests/, teardowns/ and responses/.
func openMount(mt Mount) (*mount, error) {
	m := &mount{Mount: mt, coilyFd: -1, respFd: -1}
	if err := m.open(); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *mount) open() error {
	parent, err := retryEINTR(func() (int, error) {
		return unix.Open(m.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(parent)
	if m.coilyFd, m.coilyID, err = openSubdir(parent, descriptor.DirName); err != nil {
		return fmt.Errorf("%s: %w", descriptor.DirName, err)
	}
	for _, name := range descriptor.Dirs {
		fd, id, err := openSubdir(m.coilyFd, name)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", descriptor.DirName, name, err)
		}
		d := &dir{name: name, fd: fd, id: id, path: filepath.Join(m.Dir, descriptor.DirName, name)}
		switch name {
		case descriptor.RequestsDir:
			m.dirs[0] = d
		case descriptor.TeardownsDir:
			m.dirs[1] = d
		case descriptor.ResponsesDir:
			m.respFd = fd
		default: // tmp/: created for the writers, never used here
			unix.Close(fd)
		}
	}
	return nil
}

var errNotDir = errors.New("is a symbolic link or not a directory; refusing to serve this mount")

// openSubdir creates the directory name under parent (mode 0700) if it is
// missing and opens it without following a symbolic link.
func openSubdir(parent int, name string) (int, fileID, error) {
	if err := unix.Mkdirat(parent, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fileID{}, fmt.Errorf("create: %w", err)
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EMLINK):
		return -1, fileID{}, errNotDir
	case err != nil:
		return -1, fileID{}, fmt.Errorf("open: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fileID{}, fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fileID{}, errNotDir
	}
	return fd, idOf(&st), nil
}
