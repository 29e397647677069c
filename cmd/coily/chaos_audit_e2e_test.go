package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"coily.dev/coily/audit"
)

// chaosAudit reads what the audit log holds of commands found by a
// marker in their argv (the scenarios whose commands run in bubblewrap,
// where no command can write to a run log of the test's): every
// execution allowed has its exec.result, no two executions share a
// request id, and of a group of bodies sent under one id at most one
// was allowed.
type chaosAudit struct {
	markers []string
	groups  [][]string
}

// add names commands to look for.
func (a *chaosAudit) add(markers ...string) { a.markers = append(a.markers, markers...) }

// once names bodies sent under one id: at most one may run.
func (a *chaosAudit) once(markers ...string) { a.groups = append(a.groups, markers) }

// check reads stateDir's audit log (after the server stopped) and adds
// what it found to res: a missing exec.result or a chain that does not
// verify is a record lost; a second body of a group allowed is a command
// run twice. It returns the markers allowed.
func (a *chaosAudit) check(t *testing.T, stateDir string, res *chaosResult) map[string]string {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(stateDir, "audit"), 1<<30)
	if err != nil {
		res.lost++
		res.notes = append(res.notes, "audit log unreadable: "+err.Error())
	}
	allowed := map[string]string{} // marker -> request id of its allow decision
	results := map[string]bool{}
	for _, r := range recs {
		argv := strings.Join(r.Argv, " ")
		for _, m := range a.markers {
			if !strings.Contains(argv, m) {
				continue
			}
			switch {
			case r.Event == "exec.decision" && r.Decision == "allow":
				allowed[m] = r.RequestID
			case r.Event == "exec.result":
				results[m] = true
			}
		}
	}
	owner := map[string]string{}
	for _, m := range a.markers {
		id, ok := allowed[m]
		if !ok {
			continue
		}
		if !results[m] {
			res.lost++
			res.notes = append(res.notes, fmt.Sprintf("%s: allowed (request %s) without an exec.result on record", m, id))
		}
		if o, dup := owner[id]; dup {
			res.notes = append(res.notes, fmt.Sprintf("%s and %s share request id %s", o, m, id))
			res.lost++ // one execution's records stand for another's
		}
		owner[id] = m
	}
	for _, g := range a.groups {
		var ran []string
		for _, m := range g {
			if _, ok := allowed[m]; ok {
				ran = append(ran, m)
			}
		}
		if len(ran) > 1 {
			res.twice += len(ran) - 1
			res.notes = append(res.notes, "bodies under one id all allowed: "+strings.Join(ran, ", "))
		}
	}
	if r := runCoily(t, nil, "audit", "verify", "--state-dir", stateDir); r.code != 0 {
		res.lost++
		res.notes = append(res.notes, "audit verify: "+strings.TrimSpace(r.stdout+r.stderr))
	}
	return allowed
}
