package sandbox

// Check implements Checker: bubblewrap is installed, a seccomp filter
// exists for this architecture, and this user may create user namespaces
// (a child is started in one). It is what `coily sandbox check` reports,
// short of running a command.
func (b Bwrap) Check() error {
	if _, err := b.path(); err != nil {
		return err
	}
	if _, err := HostSeccompArch(); err != nil {
		return err
	}
	return CheckUserNamespaces()
}
