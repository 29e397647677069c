//go:build !linux

package sandbox

// CheckUserNamespaces has nothing to check off Linux.
func CheckUserNamespaces() error { return nil }
