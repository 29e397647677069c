package sandbox

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MountPrefix names the private directories a server running as root
// attaches its sandboxes' idmapped workspaces in (one per command, in its
// scratch directory). What a crash leaves there is detached at the next
// start, never removed through (DetachUnder).
const MountPrefix = "coily-mnt-"

// idmapRoot attaches, at dir/name, a clone of the mount of root (an open
// writable root) whose ids pass through ns (idmapNS): the sandbox user's
// files show as the command's uid's, and what the command writes is stored
// as the sandbox user's. It returns the attached root opened as openRoot
// opens one, and a func that detaches it. The clone does not recurse: a
// mount inside the workspace stays out of it (the scans refuse to cross
// one anyway).
func idmapRoot(root *os.File, ns *os.File, dir, name string) (*os.File, func(), error) {
	tree, err := unix.OpenTree(int(root.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, nil, fmt.Errorf("clone the workspace's mount: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return nil, nil, fmt.Errorf("idmap the workspace's mount (its file system, or this kernel, may not support idmapped mounts): %w", err)
	}
	at := filepath.Join(dir, name)
	if err := os.Mkdir(at, 0o700); err != nil {
		return nil, nil, fmt.Errorf("idmapped mount point: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(at)
		return nil, nil, fmt.Errorf("attach the idmapped workspace: %w", err)
	}
	detach := func() {
		_ = unix.Unmount(at, unix.MNT_DETACH)
		_ = os.Remove(at)
	}
	f, err := openRoot(at)
	if err != nil {
		detach()
		return nil, nil, fmt.Errorf("open the idmapped workspace: %w", err)
	}
	return f, detach, nil
}

// DetachUnder detaches every mount whose mount point lies under dir
// (innermost first), so that dir can be removed without reaching into a
// mounted workspace. It reports the first mount it could not detach.
func DetachUnder(dir string) error {
	points, err := mountsUnder(filepath.Clean(dir))
	if err != nil {
		return err
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("detach %s: %w", points[i], err)
		}
	}
	return nil
}

// mountsUnder lists the mount points under dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMount(fields[4]); strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// idmap replaces r's descriptor, for a command with a uid of its own, by
// an idmapped mount of it (the i-th root's) attached in its mount
// directory: every scan, bind and check after runs through it.
func (c *Confinement) idmap(r *writableRoot, i int) error {
	d := c.dynamic
	if d == nil {
		return nil
	}
	ns, err := d.Pool.idmapNS(d.User.UID)
	if err != nil {
		return err
	}
	f, detach, err := idmapRoot(r.dir, ns, d.MountDir, "root"+strconv.Itoa(i))
	if err != nil {
		return err
	}
	c.detach = append(c.detach, detach)
	r.dir.Close()
	r.dir = f
	return nil
}

// passwdFor is the sandbox's /etc/passwd for a command with a uid of its
// own: the host's, and a line naming that uid (ssh, and other tools that
// look their user up, refuse to run as a uid no entry names), given to
// bubblewrap as data (it copies it into the sandbox, read-only).
func passwdFor(u User, home string) (mount, error) {
	host, err := readBounded("/etc/passwd", 4<<20)
	if err != nil {
		return mount{}, fmt.Errorf("/etc/passwd: %w", err)
	}
	if len(host) > 0 && host[len(host)-1] != '\n' {
		host = append(host, '\n')
	}
	line := fmt.Sprintf("%s:x:%d:%d:coily sandbox:%s:/usr/sbin/nologin\n", u.Name, u.UID, u.GID, cmp.Or(home, "/"))
	fd, err := unix.MemfdCreate("coily-passwd", unix.MFD_CLOEXEC)
	if err != nil {
		return mount{}, fmt.Errorf("passwd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "passwd")
	if _, err := f.Write(append(host, line...)); err != nil {
		f.Close()
		return mount{}, fmt.Errorf("passwd: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return mount{}, fmt.Errorf("passwd: %w", err)
	}
	return mount{op: "--ro-bind-data", file: f, dst: "/etc/passwd", rank: rankDeny}, nil
}

// readBounded reads at most limit bytes of path, refusing a longer file.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("longer than %d bytes", limit)
	}
	return data, err
}
