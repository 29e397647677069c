package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"coily.dev/coily/sandbox"
	"coily.dev/coily/server"
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

// sandboxUIDsFlag registers --sandbox-uids: the range a coily serve
// running as root gives each command a uid of its own from.
func sandboxUIDsFlag(fs *pflag.FlagSet) *string {
	return stringFlag(fs, "sandbox-uids", "COILY_SANDBOX_UIDS", "",
		fmt.Sprintf("when coily serve runs as root: FIRST:COUNT, the host uids it runs each sandboxed command as, one its own (default %d:%d); none: every command shares the sandbox user's uid", sandbox.DefaultUIDFirst, sandbox.DefaultUIDCount))
}

// parseSandboxUIDs reads --sandbox-uids: "" (the default range), "none",
// or FIRST:COUNT in decimal, within the uids the kernel has (never 0, never
// past 2^32-2), at most 65536 of them.
func parseSandboxUIDs(spec string) (server.UIDRange, error) {
	switch spec {
	case "":
		return server.UIDRange{}, nil
	case "none":
		return server.UIDRange{Off: true}, nil
	}
	a, b, ok := strings.Cut(spec, ":")
	first, err1 := strconv.ParseUint(a, 10, 32)
	count, err2 := strconv.ParseUint(b, 10, 32)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return server.UIDRange{}, fmt.Errorf("--sandbox-uids %q: want FIRST:COUNT (decimal) or none", spec)
	case first == 0 || count == 0 || count > 65536 || first+count-1 > 1<<32-2:
		return server.UIDRange{}, fmt.Errorf("--sandbox-uids %q: FIRST must be above 0, COUNT 1 to 65536, and the last uid at most 4294967294", spec)
	}
	return server.UIDRange{First: int(first), Count: int(count)}, nil
}
