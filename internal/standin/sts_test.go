package standin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// stsCases are parseSTSRequest's table and FuzzParseSTSRequest's seeds.
var stsCases = []struct {
	name, body string
	ok         bool
	action     string
	duration   time.Duration
}{
	{"caller identity", "Action=GetCallerIdentity&Version=2011-06-15", true, "GetCallerIdentity", 0},
	{"assume role (as aws-sdk-go sends it, empty Tags)", "Action=AssumeRole&DurationSeconds=3600&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fcoily-s3&RoleSessionName=vault-root-coily-1700000000-abc&Tags=&Version=2011-06-15", true, "AssumeRole", time.Hour},
	{"assume role, default duration", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/path/r&RoleSessionName=s1&Version=2011-06-15", true, "AssumeRole", time.Hour},
	{"federation token", "Action=GetFederationToken&Name=coily&DurationSeconds=900&Policy=%7B%7D&Version=2011-06-15", true, "GetFederationToken", 15 * time.Minute},
	{"federation token, 36h", "Action=GetFederationToken&Name=coily&DurationSeconds=129600&Version=2011-06-15", true, "GetFederationToken", 36 * time.Hour},

	{"empty", "", false, "", 0},
	{"not a form", "Action=%zz&Version=2011-06-15", false, "", 0},
	{"no version", "Action=GetCallerIdentity", false, "", 0},
	{"other version", "Action=GetCallerIdentity&Version=2012-01-01", false, "", 0},
	{"unknown action", "Action=DeleteUser&Version=2011-06-15", false, "", 0},
	{"action twice", "Action=GetCallerIdentity&Action=AssumeRole&Version=2011-06-15", false, "", 0},
	{"version twice", "Action=GetCallerIdentity&Version=2011-06-15&Version=2011-06-15", false, "", 0},
	{"lower-case action", "Action=assumerole&Version=2011-06-15", false, "", 0},
	{"role arn missing", "Action=AssumeRole&RoleSessionName=s1&Version=2011-06-15", false, "", 0},
	{"role arn of a user", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:user/u&RoleSessionName=s1&Version=2011-06-15", false, "", 0},
	{"role arn with a short account", "Action=AssumeRole&RoleArn=arn:aws:iam::1234:role/r&RoleSessionName=s1&Version=2011-06-15", false, "", 0},
	{"role arn with a newline", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r%0A&RoleSessionName=s1&Version=2011-06-15", false, "", 0},
	{"role arn twice", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/a&RoleArn=arn:aws:iam::123456789012:role/b&RoleSessionName=s1&Version=2011-06-15", false, "", 0},
	{"session name missing", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&Version=2011-06-15", false, "", 0},
	{"session name of one character", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s&Version=2011-06-15", false, "", 0},
	{"session name with a space", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=a+b&Version=2011-06-15", false, "", 0},
	{"session name of 65", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=" + strings.Repeat("s", 65) + "&Version=2011-06-15", false, "", 0},
	{"duration too short", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=899&Version=2011-06-15", false, "", 0},
	{"duration too long", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=43201&Version=2011-06-15", false, "", 0},
	{"duration negative", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=-3600&Version=2011-06-15", false, "", 0},
	{"duration with a plus", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=%2B3600&Version=2011-06-15", false, "", 0},
	{"duration with leading zeros", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=03600&Version=2011-06-15", false, "", 0},
	{"duration huge", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=99999999999999999999&Version=2011-06-15", false, "", 0},
	{"duration twice", "Action=AssumeRole&RoleArn=arn:aws:iam::123456789012:role/r&RoleSessionName=s1&DurationSeconds=900&DurationSeconds=3600&Version=2011-06-15", false, "", 0},
	{"federation name missing", "Action=GetFederationToken&Version=2011-06-15", false, "", 0},
	{"federation name of 33", "Action=GetFederationToken&Name=" + strings.Repeat("n", 33) + "&Version=2011-06-15", false, "", 0},
	{"federation name with a slash", "Action=GetFederationToken&Name=a/b&Version=2011-06-15", false, "", 0},
}

func TestParseSTSRequest(t *testing.T) {
	for _, tc := range stsCases {
		q, err := parseSTSRequest(tc.body)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if err == nil && (q.Action != tc.action || q.Duration != tc.duration) {
			t.Errorf("%s: %+v, want action %s, duration %s", tc.name, q, tc.action, tc.duration)
		}
	}
}

func FuzzParseSTSRequest(f *testing.F) {
	for _, tc := range stsCases {
		f.Add(tc.body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		q, err := parseSTSRequest(body)
		if err != nil {
			return
		}
		switch q.Action {
		case "GetCallerIdentity":
		case "AssumeRole":
			if !stsRoleArn.MatchString(q.RoleArn) || len(q.SessionName) < 2 || q.Duration < 15*time.Minute || q.Duration > 12*time.Hour {
				t.Fatalf("accepted %q as %+v", body, q)
			}
		case "GetFederationToken":
			if len(q.Name) < 2 || q.Duration < 15*time.Minute || q.Duration > 36*time.Hour {
				t.Fatalf("accepted %q as %+v", body, q)
			}
		default:
			t.Fatalf("accepted action %q", q.Action)
		}
	})
}

// The real AWS CLI gets temporary keys from the STS stand-in (AssumeRole,
// GetFederationToken) with a long-term key, and the S3 stand-in that
// shares its keys accepts them with their session token only: not
// without it, not with another key's, and not with a long-term key. STS
// refuses a wrong secret and a temporary key.
func TestSTSIssuesKeysS3Accepts(t *testing.T) {
	aws := Need(t, AWSPath, AWSHint)
	const rootKey, rootSecret = "AKIDSTSROOT", "sts-root-secret-1"
	keys := NewAWSKeys()
	keys.Add(rootKey, rootSecret)
	sts := STS(t, keys)
	s3 := S3WithKeys(t, keys, s3Buckets)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sts calls: %q\ns3 requests: %q", sts.Calls(), s3.Requests())
		}
	})
	base := []string{"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER="}
	stsEnv := func(key, secret string, extra ...string) []string {
		return append(append(slices.Clone(base), "AWS_CA_BUNDLE="+sts.CAFile, "AWS_ACCESS_KEY_ID="+key, "AWS_SECRET_ACCESS_KEY="+secret), extra...)
	}
	type creds struct {
		Credentials struct{ AccessKeyId, SecretAccessKey, SessionToken, Expiration string }
	}
	get := func(args ...string) creds {
		t.Helper()
		out := run(t, "", stsEnv(rootKey, rootSecret), aws, append([]string{"--endpoint-url", sts.URL, "--output", "json", "sts"}, args...)...)
		var c creds
		if err := json.Unmarshal([]byte(out), &c); err != nil || !strings.HasPrefix(c.Credentials.AccessKeyId, "ASIA") ||
			c.Credentials.SecretAccessKey == "" || c.Credentials.SessionToken == "" {
			t.Fatalf("aws sts %v: %v", args, err)
		}
		return c
	}
	assumed := get("assume-role", "--role-arn", "arn:aws:iam::123456789012:role/coily-s3", "--role-session-name", "coily-test", "--duration-seconds", "900")
	fed := get("get-federation-token", "--name", "coily")
	if out := run(t, "", stsEnv(rootKey, rootSecret), aws, "--endpoint-url", sts.URL, "sts", "get-caller-identity"); !strings.Contains(out, "123456789012") {
		t.Fatalf("get-caller-identity: %q", out)
	}
	issued := keys.Issued()
	if len(issued) != 2 || issued[0].AccessKey != assumed.Credentials.AccessKeyId || issued[0].Action != "AssumeRole" ||
		issued[1].AccessKey != fed.Credentials.AccessKeyId || issued[0].Caller != rootKey ||
		time.Until(issued[0].Expires) > 15*time.Minute || time.Until(issued[0].Expires) < 14*time.Minute {
		t.Fatalf("issued %+v", issued)
	}

	s3Env := func(key, secret, token string) []string {
		env := append(slices.Clone(base), "AWS_CA_BUNDLE="+s3.CAFile, "AWS_ACCESS_KEY_ID="+key, "AWS_SECRET_ACCESS_KEY="+secret)
		if token != "" {
			env = append(env, "AWS_SESSION_TOKEN="+token)
		}
		return env
	}
	for _, c := range []creds{assumed, fed} {
		out := run(t, "", s3Env(c.Credentials.AccessKeyId, c.Credentials.SecretAccessKey, c.Credentials.SessionToken), aws, "--endpoint-url", s3.URL, "s3", "ls")
		if !strings.Contains(out, " alpha\n") {
			t.Fatalf("s3 ls with temporary keys: %q", out)
		}
	}
	if got := s3.AccessKeys(); !slices.Equal(got, []string{assumed.Credentials.AccessKeyId, fed.Credentials.AccessKeyId}) {
		t.Fatalf("s3 served keys %q", got)
	}

	// Expired a minute ago.
	oldID, oldSecret, oldToken, _ := keys.issue("AssumeRole", rootKey, "test", time.Hour, time.Now().Add(-61*time.Minute))
	a := assumed.Credentials
	for _, tc := range []struct {
		name, key, secret, token, code string
	}{
		{"no session token", a.AccessKeyId, a.SecretAccessKey, "", "InvalidToken"},
		{"another key's token", a.AccessKeyId, a.SecretAccessKey, fed.Credentials.SessionToken, "InvalidToken"},
		{"a long-term key with a token", rootKey, rootSecret, a.SessionToken, "InvalidToken"},
		{"another key's secret", a.AccessKeyId, fed.Credentials.SecretAccessKey, a.SessionToken, "SignatureDoesNotMatch"},
		{"expired", oldID, oldSecret, oldToken, "ExpiredToken"},
	} {
		out, err := tryRun(t, "", s3Env(tc.key, tc.secret, tc.token), aws, "--endpoint-url", s3.URL, "s3", "ls")
		if err == nil || !strings.Contains(out, tc.code) {
			t.Errorf("%s: err %v, output %q; want %s", tc.name, err, out, tc.code)
		}
	}
	for _, r := range s3.Requests() {
		for _, secret := range []string{rootSecret, a.SecretAccessKey, a.SessionToken, oldToken} {
			if strings.Contains(r, secret) {
				t.Fatalf("a request line shows a secret: %q", r)
			}
		}
	}

	// STS: a wrong secret, a temporary key, another service's signature.
	for _, tc := range []struct {
		name string
		env  []string
		code string
	}{
		{"wrong secret", stsEnv(rootKey, "wrong"), "SignatureDoesNotMatch"},
		{"unknown key", stsEnv("AKIDNOBODY", rootSecret), "InvalidAccessKeyId"},
		{"temporary key", stsEnv(a.AccessKeyId, a.SecretAccessKey, "AWS_SESSION_TOKEN="+a.SessionToken), "AccessDenied"},
	} {
		out, err := tryRun(t, "", tc.env, aws, "--endpoint-url", sts.URL, "sts", "get-federation-token", "--name", "x2")
		if err == nil || !strings.Contains(out, tc.code) {
			t.Errorf("sts with %s: err %v, output %q; want %s", tc.name, err, out, tc.code)
		}
	}
	if n := len(keys.Issued()); n != 3 {
		t.Fatalf("%d keys issued, want 3 (two by the CLI, one expired by the test)", n)
	}
}
