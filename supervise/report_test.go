package supervise

import (
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/audit"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/scrub"
)

// What the scan reports is the command's: each name one item of a list
// (a name holding a comma is not two), control characters visible, the
// exec's secrets redacted, also from the error.
func TestAddReportNamesAreItems(t *testing.T) {
	const tok = "ghp_ReportCanary0123456789"
	set := scrub.NewSet([]scrub.Secret{{Name: "TOKEN", Value: tok}})
	var rec audit.Record
	AddReport(&rec, sandbox.Report{
		Quarantined: []string{"a,b/.envrc", "c/.git", "x\x1b[2Jy/.npmrc", strings.ToLower(tok) + "/.envrc"},
		Restored:    []string{"d,e"},
		Unchecked:   []string{"quarantine " + tok[:10] + "." + tok[10:] + "/.git: file name too long"},
		Limits:      "rlimit",
	}, set)
	want := []string{"a,b/.envrc", "c/.git", `x\x1b[2Jy/.npmrc`, "[REDACTED:TOKEN]/.envrc"}
	if got := rec.Lists["quarantined"]; !slices.Equal(got, want) {
		t.Errorf("quarantined = %q, want %q", got, want)
	}
	if got := rec.Lists["restored_modes"]; !slices.Equal(got, []string{"d,e"}) {
		t.Errorf("restored_modes = %q", got)
	}
	if e := strings.Join(rec.Lists["unchecked"], "\n"); strings.Contains(strings.ToLower(strings.ReplaceAll(e, ".", "")), strings.ToLower(tok)) ||
		!strings.Contains(e, "[REDACTED:TOKEN]") {
		t.Errorf("unchecked = %q", e)
	}
}
