package tsnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// slot is one node's state directory, held by this process.
type slot struct {
	n    int
	dir  string
	lock *os.File
}

// A command waits at most slotWait for a node of the pool, looking again
// every slotPoll (a lock held by another process sends no event).
const (
	slotWait = time.Minute
	slotPoll = 50 * time.Millisecond
)

// errSlotWait: slotWait passed with every node in use.
var errSlotWait = errors.New("every tailnet node in use")

// stateFile is where tsnet keeps a node's keys (its registration).
const stateFile = "tailscaled.state"

// takeSlot locks the first free state directory of the pool under root
// (node-0, node-1, …; root and each of them must be this user's private
// directory, see privateDir), waiting for one when all are in use. Each keeps
// its node registered between commands. Without an auth key only
// registered nodes are used (an unregistered one could not join), so
// concurrent commands then share them; node-0 is used when there is none,
// to say that it needs registering.
func takeSlot(ctx context.Context, root string, pool int, haveKey bool) (*slot, error) {
	if err := privateDir(root); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, slotWait, errSlotWait)
	defer cancel()
	tick := time.NewTicker(slotPoll)
	defer tick.Stop()
	for {
		for _, n := range usable(root, pool, haveKey) {
			if s, err := lockSlot(root, n); !errors.Is(err, errBusy) {
				return s, err
			}
		}
		select { // another command holds every node: wait for one
		case <-ctx.Done():
			if context.Cause(ctx) == errSlotWait {
				return nil, fmt.Errorf("all %d tailnet nodes under %s are in use by other commands", pool, root)
			}
			return nil, fmt.Errorf("waiting for a tailnet node under %s: %w", root, ctx.Err())
		case <-tick.C:
		}
	}
}

// usable lists the pool's slots a command may take, in order.
func usable(root string, pool int, haveKey bool) []int {
	var all, registered []int
	for n := range pool {
		all = append(all, n)
		if fi, err := os.Lstat(filepath.Join(root, "node-"+strconv.Itoa(n), stateFile)); err == nil && fi.Mode().IsRegular() {
			registered = append(registered, n)
		}
	}
	switch {
	case haveKey:
		return all
	case len(registered) == 0:
		return all[:1]
	}
	return registered
}

// errBusy: another command holds the slot.
var errBusy = errors.New("in use")

// lockSlot locks slot n (errBusy when another command holds it).
func lockSlot(root string, n int) (*slot, error) {
	dir := filepath.Join(root, "node-"+strconv.Itoa(n))
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tailnet node state: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return &slot{n: n, dir: dir, lock: f}, nil
	}
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, errBusy
	}
	return nil, fmt.Errorf("tailnet node state: lock %s: %w", dir, err)
}

// release unlocks the directory (the state stays).
func (s *slot) release() {
	unix.Flock(int(s.lock.Fd()), unix.LOCK_UN)
	s.lock.Close()
}

// portFile keeps the UDP port of a slot's node between commands.
const portFile = "udp-port"

// port returns the UDP port for the slot's node: the one it used last
// time, or a free one, chosen now and kept. Keeping it matters: a server
// that talked to the previous command keeps sending to the address it
// last confirmed (for several seconds, until it has pinged the new one),
// and its answer to the first WireGuard handshake must reach this
// command's node there. Otherwise it is lost, and WireGuard retries only
// after 5 s. 0 (any port) when none can be kept.
func (s *slot) port() uint16 {
	if b, err := os.ReadFile(filepath.Join(s.dir, portFile)); err == nil {
		if p, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16); err == nil && p > 0 {
			return uint16(p)
		}
	}
	c, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		return 0
	}
	p := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	if err := os.WriteFile(filepath.Join(s.dir, portFile), []byte(strconv.Itoa(p)+"\n"), 0o600); err != nil {
		return 0
	}
	return uint16(p)
}
