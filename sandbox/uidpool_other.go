//go:build !linux

package sandbox

import "errors"

// UIDPool exists only on Linux (a uid per sandbox needs bubblewrap).
type UIDPool struct{}

// Default range of UIDPool (unused here).
const (
	DefaultUIDFirst = 0x70000000
	DefaultUIDCount = 4096
)

// MountPrefix names the directories idmapped workspaces are attached in.
const MountPrefix = "coily-mnt-"

// NewUIDPool reports that there is no uid per sandbox here.
func NewUIDPool(int, int, User) (*UIDPool, error) {
	return nil, errors.New("a uid per sandbox exists only on Linux")
}

// Acquire reports that there is no pool.
func (p *UIDPool) Acquire() (User, error) { return User{}, errors.New("no sandbox uid pool") }

// Release does nothing here.
func (p *UIDPool) Release(User, func(error)) {}

// Wait does nothing here.
func (p *UIDPool) Wait() {}

// KillAll does nothing here.
func (p *UIDPool) KillAll() int { return 0 }

// Range is empty here.
func (p *UIDPool) Range() (first, count int) { return 0, 0 }

// DetachUnder does nothing here: nothing is attached.
func DetachUnder(string) error { return nil }
