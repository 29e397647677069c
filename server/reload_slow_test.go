package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// A policy written slowly, in place, in chunks with pauses of 100 ms and
// more, where each prefix ending at a line is itself a valid policy: no
// half policy is ever applied, only the old one and then the whole new one.
func TestSlowPolicyWriteNeverHalfApplied(t *testing.T) {
	in := testserver.Start(t, testserver.Options{WatchPolicy: true})
	oldSum := sha(testserver.LocalPolicy)
	next := testserver.LocalPolicy
	for i := range 8 {
		next += "  - {name: extra" + string(rune('a'+i)) + ", binary: /bin/echo, args: [x" + string(rune('a'+i)) + "], sandbox: native}\n"
	}
	newSum := sha(next)
	f, err := os.OpenFile(in.PolicyPath, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	pauses := []time.Duration{100, 250, 400, 600}
	lines := strings.SplitAfter(next, "\n")
	for i, line := range lines {
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pauses[i%len(pauses)] * time.Millisecond) // the writer's pace, not synchronisation
	}
	f.Close()
	testserver.Poll(t, 10*time.Second, "the new policy in force", func() bool {
		st, err := in.Client.API.Status(context.Background(), &coilyv1.StatusRequest{})
		return err == nil && st.GetPolicySha256() == newSum
	})
	recs, err := audit.Tail(in.StateDir+"/audit", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Event == "policy.reload" && r.Decision == "allow" && r.Details["new_sha256"] != newSum {
			t.Errorf("a policy that is neither the old (%s) nor the new one was applied: %s", oldSum[:12], r.Details["new_sha256"])
		}
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
