// Command coily-client is coily's lean client: exec, lockout, unlock,
// pause, resume, status, approvals, agents-md, shim, git and version, over
// the local socket, this machine's tailscale or a sandbox's shared folder. It
// links the API and the client transports only (no server, keystore,
// embedded tailnet node or test component), so it starts in milliseconds:
// install it as `coily` on agents' machines, phones and sandboxes.
package main

import (
	"os"

	"coily.dev/coily/cli"
	"coily.dev/coily/version"
)

func main() {
	a := cli.NewApp("coily", version.Version())
	a.Commit = version.Commit()
	os.Exit(a.Main())
}
