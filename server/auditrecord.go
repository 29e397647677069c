package server

import (
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// addReport records what the sandbox observed in the result's audit
// record: protected entries the command created and that were
// quarantined, and how it was bounded.
func addReport(rec *audit.Record, r sandbox.Report, secrets *scrub.Set) {
	// The names are the command's: made safe to show with its secrets.
	setList(rec, "quarantined", cmdtext.Strings(cmdtext.List(secrets, r.Quarantined)))
	setList(rec, "restored_modes", cmdtext.Strings(cmdtext.List(secrets, r.Restored)))
	setList(rec, "moved_aside", cmdtext.Strings(cmdtext.List(secrets, r.Aside)))
	setList(rec, "unchecked", cmdtext.Strings(cmdtext.List(secrets, r.Unchecked)))
	if r.Limits != "" {
		setDetail(rec, "limits", r.Limits)
	}
}

// setDetail sets one detail of rec.
func setDetail(rec *audit.Record, key, value string) {
	if rec.Details == nil {
		rec.Details = map[string]string{}
	}
	rec.Details[key] = value
}

// setList sets one list of rec, unless it has no items.
func setList(rec *audit.Record, key string, items []string) {
	if len(items) == 0 {
		return
	}
	if rec.Lists == nil {
		rec.Lists = map[string][]string{}
	}
	rec.Lists[key] = items
}
