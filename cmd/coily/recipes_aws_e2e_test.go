package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	"go.yaml.in/yaml/v3"

	"coily.dev/coily/audit"
	"coily.dev/coily/internal/standin"
	"coily.dev/coily/internal/vaulttest"
)

// The recipes of docs/credentials.md ("aws static keys (Vault KV)", "aws
// dynamic (Vault AWS engine, STS)") run end to end: the Vault commands,
// the Vault policy and the rule are taken from the page, changed only
// where they must point at the stand-ins.

const credentialsDoc = "../../docs/credentials.md"

// recipeBlock returns the fenced block that follows the line
// "<!-- recipe: name -->" in docs/credentials.md.
func recipeBlock(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(credentialsDoc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "<!-- recipe: "+name+" -->" {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s: no fenced block after the recipe comment %q", credentialsDoc, name)
		}
		var block []string
		for _, b := range lines[i+2:] {
			if strings.HasPrefix(b, "```") {
				return strings.Join(block, "\n") + "\n"
			}
			block = append(block, b)
		}
		t.Fatalf("%s: the block of %q does not end", credentialsDoc, name)
	}
	t.Fatalf("%s has no recipe block %q", credentialsDoc, name)
	return ""
}

// runVaultSetup does what the "$ vault …" lines of a recipe's setup block
// do, through the API as root: `vault secrets enable TYPE`, `vault write
// PATH k=v…`, `vault kv put secret/PATH k=v…`. $NAME is replaced from vars
// (a name not there fails the test), and so is a value @FILE (the content
// of the file the page names, as vars["@FILE"]); extra adds parameters to
// the write of a path (the stand-in's endpoints). Any other command fails
// the test, so the page cannot show a step no test took.
func runVaultSetup(t *testing.T, root *api.Client, block string, vars map[string]string, extra map[string]map[string]any) {
	t.Helper()
	for _, line := range strings.Split(block, "\n") {
		cmd, ok := strings.CutPrefix(line, "$ vault ")
		if !ok {
			if strings.TrimSpace(line) != "" {
				t.Fatalf("recipe line %q is not a vault command", line)
			}
			continue
		}
		f := strings.Fields(os.Expand(cmd, func(k string) string {
			v, ok := vars[k]
			if !ok {
				t.Fatalf("recipe line %q: no value for $%s", line, k)
			}
			return v
		}))
		switch {
		case len(f) == 3 && f[0] == "secrets" && f[1] == "enable":
			if err := root.Sys().Mount(f[2], &api.MountInput{Type: f[2]}); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case len(f) > 2 && f[0] == "write":
			data := kvArgs(t, line, f[2:], vars)
			for k, v := range extra[f[1]] {
				data[k] = v
			}
			if _, err := root.Logical().Write(f[1], data); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case len(f) > 3 && f[0] == "kv" && f[1] == "put" && strings.HasPrefix(f[2], "secret/"):
			if _, err := root.KVv2("secret").Put(context.Background(), strings.TrimPrefix(f[2], "secret/"), kvArgs(t, line, f[3:], vars)); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		default:
			t.Fatalf("recipe line %q: a vault command the test does not know", line)
		}
	}
}

func kvArgs(t *testing.T, line string, args []string, vars map[string]string) map[string]any {
	t.Helper()
	data := map[string]any{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("recipe line %q: argument %q is not k=v", line, a)
		}
		if strings.HasPrefix(v, "@") {
			content, ok := vars[v]
			if !ok {
				t.Fatalf("recipe line %q: no content for the file %s", line, v)
			}
			v = content
		}
		data[k] = v
	}
	return data
}

// recipeToken installs the recipe's policy block as policy name and
// returns a file holding a token with it (and Vault's default policy, as
// a token has unless told otherwise).
func recipeToken(t *testing.T, root *api.Client, name, policy string) string {
	t.Helper()
	if err := root.Sys().PutPolicy(name, policy); err != nil {
		t.Fatalf("policy %s from %s: %v", name, credentialsDoc, err)
	}
	sec, err := root.Auth().Token().Create(&api.TokenCreateRequest{Policies: []string{name}, TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "vault-token")
	if err := os.WriteFile(f, []byte(sec.Auth.ClientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// recipePolicy writes a policy file whose commands are the recipe's rule,
// pointed at the S3 stand-in, and extra rules; the local operator may run
// them all.
func recipePolicy(t *testing.T, dir, ruleBlock string, s3 *standin.S3Server, extra ...map[string]any) (string, map[string]any) {
	t.Helper()
	var rules []map[string]any
	if err := yaml.Unmarshal([]byte(ruleBlock), &rules); err != nil || len(rules) != 1 {
		t.Fatalf("the recipe's rule: %v (%d rules)", err, len(rules))
	}
	rule := rules[0]
	patchRule(t, rule, examplePatch{host: "s3.test", port: s3.Port, caFile: s3.CAFile,
		addFlags: map[string]string{"--endpoint-url": "https://s3.test:" + s3.Port}})
	cmds := []any{rule}
	names := []any{rule["name"]}
	for _, r := range extra {
		cmds = append(cmds, r)
		names = append(names, r["name"])
	}
	out, err := yaml.Marshal(map[string]any{"version": 1,
		"roles":    map[string]any{"operator": map[string]any{"permissions": []any{"exec", "status"}, "commands": names}},
		"commands": cmds})
	if err != nil {
		t.Fatal(err)
	}
	return writePolicy(t, dir, string(out)), rule
}

// startRecipeServe starts coily serve with Vault token auth from
// tokenFile on vault.
func startRecipeServe(t *testing.T, dir, pol string, vault *vaulttest.Server, tokenFile string) *serveProc {
	t.Helper()
	t.Setenv("VAULT_ADDR", vault.Addr)
	t.Setenv("VAULT_TOKEN", "")
	t.Setenv("VAULT_NAMESPACE", "")
	return startServe(t, dir, pol, "--vault-auth", "token", "--vault-token-file", tokenFile)
}

// awsLs runs `aws s3 ls` through p against the stand-in, its output kept
// by the canary.
func awsLs(t *testing.T, rc *recipeCanary, p *serveProc, s3 *standin.S3Server) cliRun {
	t.Helper()
	r := rc.run(t, p, "exec", "--", standin.AWSPath, "--endpoint-url", "https://s3.test:"+s3.Port, "--region", "us-east-1", "s3", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, " alpha\n") {
		t.Fatalf("aws s3 ls: %+v\n%s", r, p.log)
	}
	return r
}

// awsMarker is part of the command line of every recipe's aws run.
const awsMarker = "\x00s3\x00ls"

var recipeBuckets = map[string][]string{"alpha": {"report.csv"}, "beta": {"x"}}

// TestRecipeAwsStaticKV runs "aws static keys (Vault KV)".
func TestRecipeAwsStaticKV(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, standin.AWSPath, standin.AWSHint)
	const keyID = "AKIDRECIPESTATIC"
	secret := randomToken(t)
	s3 := standin.S3(t, keyID, secret, recipeBuckets, "s3.test")
	vault := vaulttest.Start(t)
	root := vault.Client(t, vault.RootToken)
	runVaultSetup(t, root, recipeBlock(t, "aws-static setup"), map[string]string{"AWS_ACCESS_KEY_ID": keyID, "AWS_SECRET_ACCESS_KEY": secret}, nil)
	tokenFile := recipeToken(t, root, "coily-aws-static", recipeBlock(t, "aws-static policy"))
	dir := shortDir(t)
	pol, _ := recipePolicy(t, dir, recipeBlock(t, "aws-static rule"), s3)
	p := startRecipeServe(t, dir, pol, vault, tokenFile)

	rc := newRecipeCanary(t)
	rc.AddString("the secret key", secret)
	awsLs(t, rc, p, s3)
	awsLs(t, rc, p, s3)
	if got := s3.AccessKeys(); !slices.Equal(got, []string{keyID, keyID}) {
		t.Fatalf("the stand-in served keys %q, want the KV key twice", got)
	}
	for _, rec := range egressRecords(t, dir) {
		if rec.Rule != "aws-s3-ls" || len(rec.Leases) != 0 || !strings.Contains(strings.Join(rec.Lists["credentials"], "\n"), "vault:secret/coily/aws#secret_access_key") {
			t.Errorf("record %+v: want the references named, no lease", rec)
		}
	}
	rc.finish(t, p, []string{awsMarker})
}

// dynamicRecipe is the "aws dynamic" recipe set up: STS and S3 stand-ins
// sharing keys, Vault's AWS engine configured from the page, a token with
// the page's policy.
type dynamicRecipe struct {
	keys      *standin.AWSKeys
	sts       *standin.STSServer
	s3        *standin.S3Server
	vault     *vaulttest.Server
	root      *api.Client
	tokenFile string
}

func setUpDynamicRecipe(t *testing.T) *dynamicRecipe {
	t.Helper()
	requireBwrap(t)
	standin.Need(t, standin.AWSPath, standin.AWSHint)
	const rootKey = "AKIDVAULTRECIPE"
	rootSecret := randomToken(t)
	d := &dynamicRecipe{keys: standin.NewAWSKeys()}
	d.keys.Add(rootKey, rootSecret)
	d.sts = standin.STS(t, d.keys)
	d.s3 = standin.S3WithKeys(t, d.keys, recipeBuckets, "s3.test")
	d.vault = vaulttest.StartAWS(t, d.sts.CAFile)
	d.root = d.vault.Client(t, d.vault.RootToken)
	runVaultSetup(t, d.root, recipeBlock(t, "aws-dynamic setup"),
		map[string]string{"VAULT_AWS_ACCESS_KEY": rootKey, "VAULT_AWS_SECRET_KEY": rootSecret},
		map[string]map[string]any{"aws/config/root": {"sts_endpoint": d.sts.URL, "iam_endpoint": d.sts.URL}})
	d.tokenFile = recipeToken(t, d.root, "coily-aws-dynamic", recipeBlock(t, "aws-dynamic policy"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sts: %q\ns3: %q", d.sts.Calls(), d.s3.Requests())
		}
	})
	return d
}

// TestRecipeAwsDynamicSTS runs "aws dynamic (Vault AWS engine, STS)":
// each exec's key, secret and session token come from one AssumeRole (one
// lease); the S3 stand-in accepts them only together; the exec's record
// names the lease, which is gone from Vault once the exec is over.
func TestRecipeAwsDynamicSTS(t *testing.T) {
	d := setUpDynamicRecipe(t)
	dir := shortDir(t)
	pol, _ := recipePolicy(t, dir, recipeBlock(t, "aws-dynamic rule"), d.s3)
	p := startRecipeServe(t, dir, pol, d.vault, d.tokenFile)

	rc := newRecipeCanary(t)
	awsLs(t, rc, p, d.s3)
	awsLs(t, rc, p, d.s3)
	issued := d.keys.Issued()
	if len(issued) != 2 || issued[0].Action != "AssumeRole" || !strings.HasPrefix(issued[0].Subject, "arn:aws:iam::123456789012:role/coily-s3-read ") {
		t.Fatalf("STS issued %+v, want one AssumeRole of the recipe's role per exec", issued)
	}
	if got := d.s3.AccessKeys(); !slices.Equal(got, []string{issued[0].AccessKey, issued[1].AccessKey}) {
		t.Fatalf("the stand-in served keys %q, want each exec's own temporary key", got)
	}
	recs := egressRecords(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d exec records", len(recs))
	}
	var leases []string
	for _, rec := range recs {
		if len(rec.Leases) != 1 || !strings.HasPrefix(rec.Leases[0], "aws/sts/coily-s3/") || rec.Details["leases_revoked"] != "1" {
			t.Fatalf("record of rule %s: leases %q, details %v", rec.Rule, rec.Leases, rec.Details)
		}
		if d.vault.LeaseAlive(t, rec.Leases[0]) {
			t.Fatalf("lease %s is alive in Vault after its exec", rec.Leases[0])
		}
		leases = append(leases, rec.Leases[0])
	}
	if leases[0] == leases[1] {
		t.Fatal("two execs shared a lease")
	}
	for _, sec := range d.keys.Secrets() { // Vault's root key and each exec's temporary keys
		rc.AddString("an AWS secret key", sec)
	}
	rc.finish(t, p, []string{awsMarker})
}

// TestRecipeAwsDynamicRevokedAfterKill: the server is killed (SIGKILL)
// while a command holds the recipe's credentials; the lease outlives it in
// Vault until the next start revokes it and audits that.
func TestRecipeAwsDynamicRevokedAfterKill(t *testing.T) {
	d := setUpDynamicRecipe(t)
	dir := shortDir(t)
	var docRule []map[string]any
	if err := yaml.Unmarshal([]byte(recipeBlock(t, "aws-dynamic rule")), &docRule); err != nil {
		t.Fatal(err)
	}
	hold := map[string]any{"name": "aws-hold", "binary": "/bin/sleep", "args": []any{"*"}, "timeout": "5m",
		"credentials": docRule[0]["credentials"]}
	pol, _ := recipePolicy(t, dir, recipeBlock(t, "aws-dynamic rule"), d.s3, hold)
	p := startRecipeServe(t, dir, pol, d.vault, d.tokenFile)

	rc := newRecipeCanary(t)
	client := exec.Command(coilyBin, "--socket", p.socket, "exec", "--", "/bin/sleep", "300")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Process.Kill(); _ = client.Wait() })
	// The allow decision is written after the lease is recorded and
	// before the command starts.
	decision := waitRecord(t, dir, func(r audit.Record) bool {
		return r.Event == "exec.decision" && r.Decision == "allow" && r.Rule == "aws-hold"
	})
	if len(decision.Leases) != 1 {
		t.Fatalf("decision record carries leases %q", decision.Leases)
	}
	lease := decision.Leases[0]
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	if !d.vault.LeaseAlive(t, lease) {
		t.Fatal("the lease is gone though nobody revoked it")
	}

	p = startRecipeServe(t, dir, pol, d.vault, d.tokenFile)
	deadline := time.Now().Add(30 * time.Second)
	for d.vault.LeaseAlive(t, lease) {
		if time.Now().After(deadline) {
			t.Fatalf("the next start did not revoke the lease:\n%s", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rev := waitRecord(t, dir, func(r audit.Record) bool { return r.Event == "lease.revoke" })
	if len(rev.Leases) != 1 || rev.Leases[0] != lease || rev.RequestID != decision.RequestID || rev.Details["result"] != "revoked" {
		t.Fatalf("lease.revoke record %+v", rev)
	}
	for _, sec := range d.keys.Secrets() {
		rc.AddString("an AWS secret key", sec)
	}
	rc.finish(t, p, []string{"/bin/sleep\x00300"})
}

// waitRecord polls the audit log of dir until a record matches.
func waitRecord(t *testing.T, dir string, match func(audit.Record) bool) audit.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(readAudit(t, dir)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r audit.Record
			if json.Unmarshal(sc.Bytes(), &r) == nil && match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no matching audit record within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
