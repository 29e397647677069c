package access

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"time"
)

// ListenLocal creates the local operator socket at path. The socket is
// mode 0600, or 0660 owned by group when one is given; the kernel's peer
// credentials, not the mode, decide who is served. A stale socket left by a
// dead server is replaced; a live one, or a non-socket file, is an error.
func ListenLocal(path, group string) (*net.UnixListener, error) {
	if err := clearStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(true)
	if err := restrictSocket(path, group); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func restrictSocket(path, group string) error {
	if group == "" {
		return os.Chmod(path, 0o600)
	}
	gid, err := LookupGroup(group)
	if err != nil {
		return err
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("socket group: %w", err)
	}
	return os.Chmod(path, 0o660)
}

// LookupGroup resolves a group name (or numeric gid) to a gid.
func LookupGroup(group string) (int, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		if g2, err2 := user.LookupGroupId(group); err2 == nil {
			g = g2
		} else {
			return 0, fmt.Errorf("operator group %q: %w", group, err)
		}
	}
	return strconv.Atoi(g.Gid)
}

func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another server is listening on it", path)
	}
	return os.Remove(path)
}
