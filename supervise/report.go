package supervise

import (
	"coily.dev/coily/audit"
	"coily.dev/coily/cmdtext"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// AddReport records what the sandbox observed in the result's audit
// record: protected entries the command created and that were
// quarantined, modes restored, what was moved aside or left unchecked,
// and how it was bounded.
func AddReport(rec *audit.Record, r sandbox.Report, secrets *scrub.Set) {
	// The names are the command's: made safe to show with its secrets.
	rec.SetList("quarantined", cmdtext.Strings(cmdtext.List(secrets, r.Quarantined)))
	rec.SetList("restored_modes", cmdtext.Strings(cmdtext.List(secrets, r.Restored)))
	rec.SetList("moved_aside", cmdtext.Strings(cmdtext.List(secrets, r.Aside)))
	rec.SetList("unchecked", cmdtext.Strings(cmdtext.List(secrets, r.Unchecked)))
	if r.Limits != "" {
		rec.SetDetail("limits", r.Limits)
	}
}
