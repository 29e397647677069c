package tsnode

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// privateDir creates dir (and its parents) when missing, then accepts it
// only as this user's own: a real directory, not a symbolic link, owned by
// the effective uid and writable by no group or other user, so that nobody
// else can read the node keys kept there or plant their own (in a shared
// /tmp another user could have created it first). A directory of ours
// with a wider mode than 0700 is narrowed to 0700. The check is made on
// the directory opened without following a link, so it cannot be swapped
// between the check and the chmod.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tailnet node state %s: %w", dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("tailnet node state %s: %w", dir, err)
	} else if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("tailnet node state %s is %s: refusing it (remove it, or pass another state directory)", dir, kind(fi.Mode()))
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tailnet node state %s: %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("tailnet node state %s: %w", dir, err)
	}
	perm := uint32(st.Mode) & 0o777
	switch euid := os.Geteuid(); {
	case int(st.Uid) != euid:
		return fmt.Errorf("tailnet node state %s is owned by uid %d, not by you (uid %d): refusing it (remove it, or pass another state directory)", dir, st.Uid, euid)
	case perm&0o022 != 0:
		return fmt.Errorf("tailnet node state %s is writable by other users (mode %04o): refusing it (remove it, or pass another state directory)", dir, perm)
	case perm != 0o700:
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("tailnet node state %s: chmod 0700: %w", dir, err)
		}
	}
	return nil
}

// kind says what a file that should be a directory is.
func kind(m os.FileMode) string {
	if m&os.ModeSymlink != 0 {
		return "a symbolic link"
	}
	return "not a directory"
}
