package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"coily.dev/coily/sandbox"
)

// sandboxUserFlag registers --sandbox-user: who a coily running as root
// runs its sandboxes as (never root itself).
func sandboxUserFlag(fs *pflag.FlagSet) *string {
	return stringFlag(fs, "sandbox-user", "COILY_SANDBOX_USER", "",
		"when coily runs as root: the unprivileged user every sandbox runs as, a NAME or UID (default "+sandbox.DefaultUserName+"; never root)")
}

// sandboxUser reads --sandbox-user: zero when not given (a root process
// then uses sandbox.DefaultUser); an error for root, group 0, an unknown
// user, or any value given to a process not running as root (its
// sandboxes run as itself).
func sandboxUser(spec string) (sandbox.User, error) {
	if spec == "" {
		return sandbox.User{}, nil
	}
	if os.Geteuid() != 0 {
		return sandbox.User{}, fmt.Errorf("--sandbox-user applies when coily runs as root; it runs as uid %d, and so do its sandboxes", os.Geteuid())
	}
	return sandbox.ParseUser(spec)
}
