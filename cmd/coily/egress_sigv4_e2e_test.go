package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/canary"
	"coily.dev/coily/internal/standin"
)

// A rule that injects a temporary AWS key by re-signing (form sigv4): the
// real `aws s3 ls` and `aws s3 cp` (up and down), holding placeholders
// for the key id, secret and session token, reach the S3 stand-in over
// TLS through the inspecting proxy, which re-signs each request with the
// real key; the stand-in verifies every signature. The secret and the
// token are nowhere in the sandbox (its environment, every
// /proc/PID/environ, the files under /run/coily, its temp directories
// and home: what is found there is printed, and the server would redact
// it), the answer, the server's log or the audit log; the placeholder key
// sent to another host is refused.
func TestCLIExecEgressInjectSigV4(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, standin.AWSPath, standin.AWSHint)
	dir := shortDir(t)
	keys := standin.NewAWSKeys()
	keys.Add("AKIDCALLER", "caller-secret")
	id, secret, token := keys.Issue("AKIDCALLER", "arn:aws:iam::123456789012:role/coily-s3", time.Hour)
	const s3h, other = "s3.example.test", "other.example.test"
	s3 := standin.S3WithKeys(t, keys, map[string][]string{"alpha": {"report.csv"}, "quirk": nil}, s3h, other)
	s3.DisagreeOn("/quirk/") // S3's SignatureDoesNotMatch there quotes the key id and the token
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("aws_id="+id+"\naws_secret="+secret+"\naws_token="+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`version: 1
roles: {operator: {permissions: [exec, status], commands: [sh]}}
commands:
  - name: sh
    binary: /bin/sh
    args: ["**"]
    flags: any
    network: proxied
    sandbox: bwrap
    ca_file: %[1]s
    egress:
      allow: ["%[2]s:%[3]s", "%[4]s:%[3]s"]
      allow_cidrs: [127.0.0.0/8]
      hosts: {%[2]s: [127.0.0.1], %[4]s: [127.0.0.1]}
      inspect: [%[2]s, %[4]s]
      inject:
        - {env: AWS_ACCESS_KEY_ID, credential: "file:aws_id", host: "%[2]s:%[3]s", form: sigv4}
        - {env: AWS_SECRET_ACCESS_KEY, credential: "file:aws_secret", host: "%[2]s:%[3]s", form: sigv4}
        - {env: AWS_SESSION_TOKEN, credential: "file:aws_token", host: "%[2]s:%[3]s", form: sigv4}
`, s3.CAFile, s3h, s3.Port, other)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, pol, "--credentials-file", creds)
	script := `export HOME=$(mktemp -d) AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_PAGER= AWS_DEFAULT_REGION=us-east-1
aws() { ` + standin.AWSPath + ` "$@" 2>&1; }
E=https://` + s3h + `:` + s3.Port + `
echo "ls=$(aws --endpoint-url $E s3 ls)"
echo "hello through the proxy" > $HOME/up.txt
echo "up=$(aws --endpoint-url $E s3 cp $HOME/up.txt s3://alpha/up.txt)"
echo "down=$(aws --endpoint-url $E s3 cp s3://alpha/up.txt -)"
echo "elsewhere=$(aws --endpoint-url https://` + other + `:` + s3.Port + ` s3 ls)"
C() { curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-security-token: $AWS_SESSION_TOKEN" -H "x-amz-content-sha256: ` + emptySHA256 + `" "$@" 2>&1; }
echo "bang=$(C "$E/alpha/a!.txt")"
echo "semicolon=$(C "$E/alpha?list-type=2&a=1;b=2")"
echo "quirk=$(C "$E/quirk/x")"
echo "--- env"; env
echo "--- environ"; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done
echo "--- files"; grep -rIho -e 'FQoGZXIvYXdzE[A-Za-z0-9_-]*' -e 'ASIA[A-Z2-7]\{16\}' /run/coily "$TMPDIR" /tmp "$HOME" 2>/dev/null
true`
	r := p.run(t, "exec", "--", "/bin/sh", "-c", script)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("S3 requests: %q", s3.Requests())
		}
	})
	for _, want := range []string{"2024-01-02 03:04:05 alpha\n", " to s3://alpha/up.txt", "down=hello through the proxy\n",
		"elsewhere=\nAn error occurred (403)", "AWS_ACCESS_KEY_ID=coily-placeholder-", "AWS_SECRET_ACCESS_KEY=coily-placeholder-",
		"AWS_SESSION_TOKEN=coily-placeholder-", "AWS_CA_BUNDLE=/run/coily/ca.pem",
		"bang=<?xml", "<Code>NoSuchKey</Code>", // signed as S3 reads a path with "!"
		"semicolon=coily: the query", "quirk=<?xml", "<Code>SignatureDoesNotMatch</Code><Message>"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 || strings.Contains(r.stdout, "REDACTED") || strings.Contains(r.stderr, "REDACTED") {
		t.Errorf("exit %d; the sandbox held the key if its output was redacted:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got, ok := s3.Object("alpha", "up.txt"); !ok || string(got) != "hello through the proxy\n" {
		t.Errorf("S3 stored %q, %v", got, ok)
	}
	for _, k := range s3.AccessKeys() {
		if k != id {
			t.Errorf("S3 served a request signed with %q, want the real key", k)
		}
	}
	c := canary.New(t)
	c.AddString("aws secret", secret)
	c.AddString("aws session token", token)
	c.AddString("aws key id", id)
	c.AddString("aws session token as S3's CanonicalRequestBytes", s3HexBytes(token))
	c.CheckText("the exec's answer", r.stdout, r.stderr)
	c.CheckText("the server's log", p.log.String())
	c.CheckText("the audit log", readAudit(t, dir))
	recs := egressRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d exec.result records", len(recs))
	}
	var injected, refused int
	for _, q := range recs[0].EgressRequests {
		if q.Injected && q.Status == 200 && q.Host == s3h {
			injected++
		}
		if q.Decision == "deny" && q.Status == 403 && q.Host == other && q.Reason == "placeholder" {
			refused++
		}
	}
	if injected < 4 || refused != 1 {
		t.Errorf("request rows %+v: want 4+ injected, 1 refused", recs[0].EgressRequests)
	}
}

// `coily sandbox exec --egress-inject VAR@HOST:sigv4` for the three AWS
// variables: the real aws s3 ls, holding placeholders, is re-signed with
// the key from coily's own environment.
func TestSandboxExecEgressInjectSigV4(t *testing.T) {
	requireBwrap(t)
	standin.Need(t, standin.AWSPath, standin.AWSHint)
	keys := standin.NewAWSKeys()
	keys.Add("AKIDCALLER", "caller-secret")
	id, secret, token := keys.Issue("AKIDCALLER", "arn:aws:iam::123456789012:role/coily-s3", time.Hour)
	s3 := standin.S3WithKeys(t, keys, map[string][]string{"alpha": {"report.csv"}})
	at := "@localhost:" + s3.Port + ":sigv4"
	script := `export HOME=$(mktemp -d) AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_PAGER= AWS_DEFAULT_REGION=us-east-1 NO_PROXY= no_proxy=
` + standin.AWSPath + ` --endpoint-url https://localhost:` + s3.Port + ` s3 ls 2>&1; env | grep -c -e ` + "FQoGZXIvYXdzE" + ` -e ASIA || true`
	cmd := exec.Command(coilyBin, "sandbox", "exec", "--network", "proxied", "--egress-allow", "localhost:"+s3.Port,
		"--egress-allow-cidr", "127.0.0.0/8", "--egress-inspect", "localhost", "--egress-inject", "AWS_ACCESS_KEY_ID"+at,
		"--egress-inject", "AWS_SECRET_ACCESS_KEY"+at, "--egress-inject", "AWS_SESSION_TOKEN"+at, "--", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+id, "AWS_SECRET_ACCESS_KEY="+secret, "AWS_SESSION_TOKEN="+token, "SSL_CERT_FILE="+s3.CAFile)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), " alpha\n") || !strings.HasSuffix(out.String(), "\n0\n") {
		t.Fatalf("sandbox exec: %v\nstdout %s\nstderr %s\nS3 %q", err, out.String(), errb.String(), s3.Requests())
	}
	if !strings.Contains(errb.String(), "coily: request allow  localhost:"+s3.Port+"  GET /  200") || !strings.Contains(errb.String(), "injected") {
		t.Errorf("stderr lacks the request row:\n%s", errb.String())
	}
	c := canary.New(t)
	c.AddString("aws secret", secret)
	c.AddString("aws session token", token)
	c.CheckText("sandbox exec's output", out.String(), errb.String())
}

// emptySHA256 is the SHA-256 of nothing, in hex.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// s3HexBytes is s as S3's error bodies spell bytes: "47 45 54 …".
func s3HexBytes(s string) string {
	parts := make([]string, len(s))
	for i := range len(s) {
		parts[i] = fmt.Sprintf("%02x", s[i])
	}
	return strings.Join(parts, " ")
}
