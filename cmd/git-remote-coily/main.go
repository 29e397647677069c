// Command git-remote-coily is the git remote helper for coily:: URLs
// (package client/gitremote): git through coily's git proxy on the local
// socket, with git's own smart HTTP transport. git runs it; `coily git
// setup` writes the rewrites that send https://HOST/ URLs to it.
package main

import (
	"fmt"
	"os"

	"coily.dev/coily/client/gitremote"
	"coily.dev/coily/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(gitremote.Name, version.Line())
		return
	}
	os.Exit(gitremote.Main())
}
