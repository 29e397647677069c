//go:build !linux

package sandbox

// OwnProc reports whether sandboxes start bwrap with a /proc of its own:
// never, where there is no bwrap.
func OwnProc() bool { return false }
