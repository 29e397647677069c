//go:build !linux

package sandbox

import "errors"

// CheckUserNamespaces has nothing to check off Linux.
func CheckUserNamespaces() error { return nil }

// CheckWorkspace scans workspaces on Linux only.
func CheckWorkspace(string, ScanBudget) (int, error) {
	return 0, errors.New("the workspace scan runs on Linux only")
}
