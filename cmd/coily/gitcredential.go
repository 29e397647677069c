package main

import (
	"context"
	"os"

	"coily.dev/coily/gitcred"
)

// runGitCredential is git's credential helper inside a sandbox (hidden
// command `__git-credential get|store|erase`, configured by the server
// through GIT_CONFIG_*): it answers get with the rule's credential for the
// requested https host, and nothing for any other request. It exits 0
// either way, so that git goes on (and fails to authenticate) without a
// credential; a refusal's reason, never a password, goes to stderr.
func runGitCredential(_ context.Context, e *env) int {
	if len(e.args) != 1 {
		printLine(e.stderr, "usage: coily %s get|store|erase", gitcred.HelperCommand)
		return 2
	}
	creds, err := gitcred.FromEnv(os.LookupEnv)
	if err != nil {
		printLine(e.stderr, "coily: git credential: %v", err)
		return 0
	}
	if err := gitcred.Serve(e.args[0], e.stdin, e.stdout, creds); err != nil {
		printLine(e.stderr, "coily: git credential: %v", err)
	}
	return 0
}
