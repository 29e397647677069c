package main

import (
	"testing"

	"coily.dev/coily/internal/canary"
)

// recipeCanary is a recipe test's canary (internal/canary): its secrets,
// the sampling of every process's argv while the recipe's commands run,
// and the outputs the test saw.
type recipeCanary struct {
	*canary.Canary
	watch   *canary.ArgvWatch
	outputs []string
}

// newRecipeCanary starts watching argv at once: add the secrets as they
// become known (a token minted during the run counts at finish).
func newRecipeCanary(t *testing.T) *recipeCanary {
	c := canary.New(t)
	return &recipeCanary{Canary: c, watch: c.WatchArgv()}
}

// run runs coily against p and keeps what it printed.
func (rc *recipeCanary) run(t *testing.T, p *serveProc, args ...string) cliRun {
	t.Helper()
	r := p.run(t, args...)
	rc.outputs = append(rc.outputs, r.stdout, r.stderr)
	return r
}

// finish ends the argv sampling (which must have seen each of markers, a
// part of the recipe's command lines with NULs between words), stops the
// server and looks for every secret in what coily printed, the audit log,
// the server's log, and every file under the server's state directory
// (scratch directories, store, audit log) and roots (the workspace).
func (rc *recipeCanary) finish(t *testing.T, p *serveProc, markers []string, roots ...string) {
	t.Helper()
	rc.watch.Stop(markers...)
	p.stop()
	rc.CheckText("coily's output", rc.outputs...)
	rc.CheckText("the audit log", readAudit(t, p.dir))
	rc.CheckText("the server's log", p.log.String())
	rc.CheckFiles(append([]string{p.dir}, roots...)...)
}
