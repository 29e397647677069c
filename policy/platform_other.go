//go:build !linux

package policy

const defaultSandbox = SandboxSandboxExec
