package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"coily.dev/coily/internal/standin"
)

// The aws-s3-ls rule of examples/egress.yaml works with the real AWS CLI:
// `aws s3 ls` lists the buckets and the keys of one through the rule's
// egress proxy, signing with the keys coily injects, against a local S3
// stand-in that verifies the signature. The secret reaches neither the
// caller nor the audit log, and the record holds one allow row for the
// stand-in and nothing else.
func TestExampleAwsS3Ls(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, standin.AWSPath, standin.AWSHint)
	const keyID = "AKIDCOILYEXAMPLE"
	secret := randomToken(t)
	s3 := standin.S3(t, keyID, secret, map[string][]string{
		"alpha": {"report.csv", "logs/2024-01-01.txt"},
		"beta":  {"x"},
	}, "s3.test")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("requests on the stand-in: %q", s3.Requests())
		}
	})
	endpoint := "https://s3.test:" + s3.Port
	dir := shortDir(t)
	pol := patchExamples(t, dir, map[string]examplePatch{
		"aws-s3-ls": {host: "s3.test", port: s3.Port, caFile: s3.CAFile, addFlags: map[string]string{"--endpoint-url": endpoint}},
	})
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("aws-key-id="+keyID+"\naws-secret="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--credentials-file", creds)
	aws := func(args ...string) cliRun {
		t.Helper()
		r := p.run(t, append([]string{"exec", "--", standin.AWSPath}, args...)...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Fatalf("the secret reached the caller: %v", args)
		}
		return r
	}

	// --region spares the CLI a look for one at the instance metadata
	// service, which every proxy refuses.
	r := aws("--endpoint-url", endpoint, "--region", "us-east-1", "s3", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, " alpha\n") || !strings.Contains(r.stdout, " beta\n") {
		t.Fatalf("aws s3 ls: %+v\n%s", r, p.log)
	}
	r = aws("--endpoint-url", endpoint, "--region", "us-east-1", "s3", "ls", "s3://alpha/")
	if r.code != 0 || !strings.Contains(r.stdout, "PRE logs/\n") || !strings.Contains(r.stdout, " report.csv\n") {
		t.Fatalf("aws s3 ls s3://alpha/: %+v\n%s", r, p.log)
	}
	wantReqs := []string{"GET / ListBuckets", "GET /alpha ListObjectsV2 prefix= delimiter=/"}
	if got := s3.Requests(); !slices.Equal(got, wantReqs) {
		t.Fatalf("the stand-in served %q, want %q (signed with the injected keys)", got, wantReqs)
	}

	// The rule holds: another endpoint, or flags it does not list, are
	// refused before anything runs.
	for _, args := range [][]string{
		{"--endpoint-url", "https://evil.test:" + s3.Port, "s3", "ls"},
		{"--endpoint-url", endpoint, "--no-verify-ssl", "s3", "ls"},
		{"--endpoint-url", endpoint, "--profile", "other", "s3", "ls"},
		{"--endpoint-url", endpoint, "s3", "cp", "s3://alpha/report.csv", "-"},
	} {
		if r := aws(args...); r.code != 125 || !strings.Contains(r.stderr, "policy-deny") {
			t.Errorf("aws %v: %+v", args, r)
		}
	}
	if got := len(s3.Requests()); got != len(wantReqs) {
		t.Fatalf("a refused command reached the stand-in: %q", s3.Requests())
	}

	// Without --region the CLI asks the instance metadata service for
	// one: the proxy refuses that, and the command still runs.
	r = aws("--endpoint-url", endpoint, "s3", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, " alpha\n") || !strings.Contains(r.stderr, "169.254.169.254:80 is a cloud metadata address") {
		t.Fatalf("aws s3 ls without --region: %+v", r)
	}

	// One allow row for the stand-in per exec, nothing refused, and the
	// secret nowhere in the audit log or the server's log.
	recs := egressRecords(t, dir)
	if len(recs) != 3 {
		t.Fatalf("%d exec records, want 3: %+v", len(recs), recs)
	}
	decisions := map[string]string{}
	for _, row := range recs[2].Egress {
		decisions[row.Host] = row.Decision
	}
	if len(recs[2].Egress) != 2 || decisions["169.254.169.254"] != "deny" || decisions["s3.test"] != "allow" {
		t.Errorf("without --region: rows %+v, want a refusal for the metadata service and an allow for s3.test", recs[2].Egress)
	}
	for _, rec := range recs[:2] {
		if rec.Rule != "aws-s3-ls" || len(rec.Egress) != 1 {
			t.Errorf("record of rule %q with rows %+v, want one row", rec.Rule, rec.Egress)
			continue
		}
		if row := rec.Egress[0]; row.Decision != "allow" || row.Host != "s3.test" || strconv.Itoa(row.Port) != s3.Port {
			t.Errorf("row %+v, want allow s3.test:%s", row, s3.Port)
		}
	}
	if strings.Contains(readAudit(t, dir), secret) || strings.Contains(p.log.String(), secret) {
		t.Fatal("the secret is in the audit log or the server's log")
	}
}
