//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"syscall"
)

// Start implements the start gate; only bubblewrap (Linux) has one.
func (c *Confinement) Start(context.Context, *os.Process) error { return nil }

// Signal does nothing here: the caller signals the process group.
func (c *Confinement) Signal(syscall.Signal) {}

// Kill does nothing here: the caller signals the process group.
func (c *Confinement) Kill() {}

// Finish has nothing to report here.
func (c *Confinement) Finish(string) Report { return Report{} }

// Cgroups exist only on Linux.
type Cgroups struct {
	Dir          string
	Memory, Pids bool
	Prefix       string
}

// FindCgroups reports that there are no cgroups here.
func FindCgroups(string) (*Cgroups, error) { return nil, errors.New("cgroups exist only on Linux") }

// InspectCgroups reports that there are no cgroups here.
func InspectCgroups() (*Cgroups, error) { return nil, errors.New("cgroups exist only on Linux") }

func (g *Cgroups) killAll() {}

// Cleanup does nothing here.
func (g *Cgroups) Cleanup() int { return 0 }

type execCgroup struct{}

func (e *execCgroup) remove() {}
