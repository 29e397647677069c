package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Resolution by descriptor (docs/sandbox.md): every path under a writable root is
// opened relative to a descriptor of its parent, one component at a time or
// with openat2, without following symbolic links, so that nothing a command
// (or a repository) put in the workspace can redirect what coily binds,
// masks or protects.

// openRoot opens a writable root by its absolute path without following a
// symbolic link in any component: the server hands over paths it resolved
// itself, so a link found now was put there since (by a command in an
// enclosing directory, say) and is refused (errSymlink), never followed.
// Mount points may be crossed: a workspace may live on its own file system.
func openRoot(path string) (*os.File, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, fmt.Errorf("root %q is not a clean absolute path", path)
	}
	how := unix.OpenHow{
		Flags:   uint64(unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), path), nil
	case errors.Is(err, unix.ENOSYS):
		return walkRoot(path)
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) && isLink(path):
		return nil, &os.PathError{Op: "openat2", Path: path, Err: errSymlink}
	}
	return nil, &os.PathError{Op: "openat2", Path: path, Err: err}
}

// isLink reports whether path's last component is a symbolic link.
func isLink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// walkRoot is openRoot one component at a time (kernels before 5.6).
func walkRoot(path string) (*os.File, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	dir := os.NewFile(uintptr(fd), "/")
	if path == "/" {
		defer dir.Close()
		return openBeneath(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	}
	parts := strings.Split(path[1:], "/")
	for i, part := range parts {
		f := unix.O_PATH | unix.O_DIRECTORY
		if i == len(parts)-1 {
			f = unix.O_RDONLY | unix.O_DIRECTORY
		}
		next, err := openAt(dir, part, f)
		link := err != nil && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) && isLinkAt(dir, part))
		dir.Close()
		switch {
		case link:
			return nil, &os.PathError{Op: "openat", Path: path, Err: errSymlink}
		case err != nil:
			return nil, err
		}
		dir = next
	}
	return dir, nil
}

// openAt opens name (one component) in dir without following a symbolic
// link. flags add to O_NOFOLLOW|O_CLOEXEC; with unix.O_PATH the result can
// be bound but not read.
func openAt(dir *os.File, name string, flags int) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("bad path component %q", name)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// errSymlink reports a symbolic link where coily resolves by descriptor.
var errSymlink = errors.New("is a symbolic link")

// openBeneath opens rel, a clean relative path, beneath root: never leaving
// it, never following a symbolic link (errSymlink), never crossing into
// another mount. It uses openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS) and falls back, on kernels before
// 5.6, to a walk one component at a time with O_NOFOLLOW and a device check.
func openBeneath(root *os.File, rel string, flags int) (*os.File, error) {
	if rel == "" || rel == "." {
		fd, err := unix.Openat(int(root.Fd()), ".", flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "openat", Path: root.Name(), Err: err}
		}
		return os.NewFile(uintptr(fd), root.Name()), nil
	}
	if filepath.IsAbs(rel) || filepath.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("path %q is not clean and relative", rel)
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(int(root.Fd()), rel, &how)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), filepath.Join(root.Name(), rel)), nil
	case errors.Is(err, unix.ENOSYS):
		return walkBeneath(root, rel, flags)
	case errors.Is(err, unix.ELOOP):
		return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root.Name(), rel), Err: errSymlink}
	}
	return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root.Name(), rel), Err: err}
}

// walkBeneath is openBeneath one component at a time.
func walkBeneath(root *os.File, rel string, flags int) (*os.File, error) {
	var rootSt unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &rootSt); err != nil {
		return nil, err
	}
	parts := strings.Split(rel, "/")
	dir := root
	for i, part := range parts {
		last := i == len(parts)-1
		f := flags
		if !last {
			f = unix.O_PATH | unix.O_DIRECTORY
		}
		next, err := openAt(dir, part, f)
		if err != nil {
			link := errors.Is(err, unix.ELOOP) || isLinkAt(dir, part)
			if dir != root {
				dir.Close()
			}
			if link {
				return nil, &os.PathError{Op: "openat", Path: filepath.Join(root.Name(), rel), Err: errSymlink}
			}
			return nil, err
		}
		if dir != root {
			dir.Close()
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(next.Fd()), &st); err != nil || st.Dev != rootSt.Dev || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			next.Close()
			why := error(unix.EXDEV)
			if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				why = errSymlink
			}
			return nil, &os.PathError{Op: "openat", Path: filepath.Join(root.Name(), rel), Err: why}
		}
		dir = next
	}
	return dir, nil
}

// isLinkAt reports whether name in dir is a symbolic link.
func isLinkAt(dir *os.File, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// statFD returns the file's identity and type.
func statFD(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(int(f.Fd()), &st)
	return st, err
}

// deepChunk bounds the part of a path opened in one call, well under
// PATH_MAX (4096), which a path the command made may exceed.
const deepChunk = 2048

// openDeep is openBeneath for a path of any length: a long one is opened
// a part at a time, each beneath the directory the last part opened (so
// beneath root, never through a link), since the kernel refuses a path
// longer than PATH_MAX.
func openDeep(root *os.File, rel string, flags int) (*os.File, error) {
	if len(rel) <= deepChunk {
		return openBeneath(root, rel, flags)
	}
	parts := strings.Split(rel, "/")
	dir, own := root, false
	defer func() {
		if own {
			dir.Close()
		}
	}()
	for len(parts) > 0 {
		n, size := 0, 0
		for n < len(parts) && (n == 0 || size+1+len(parts[n]) <= deepChunk) {
			size += 1 + len(parts[n])
			n++
		}
		chunk := strings.Join(parts[:n], "/")
		parts = parts[n:]
		how := unix.O_PATH | unix.O_DIRECTORY
		if len(parts) == 0 {
			how = flags
		}
		next, err := openBeneath(dir, chunk, how)
		if err != nil {
			return nil, err
		}
		if own {
			dir.Close()
		}
		dir, own = next, true
	}
	own = false
	return dir, nil
}

// errNotRegular reports something other than a regular file where coily
// reads one.
var errNotRegular = errors.New("is not a regular file")

// openRegular opens name in dir for reading without ever blocking on what
// a command made: O_NONBLOCK (a FIFO opens at once, and so does a
// socket's refusal) and O_NOFOLLOW, then anything but a regular file is
// refused (errNotRegular) before a byte is read.
func openRegular(dir *os.File, name string) (*os.File, error) {
	f, err := openAt(dir, name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	st, err := statFD(f)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = &os.PathError{Op: "open", Path: f.Name(), Err: errNotRegular}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
