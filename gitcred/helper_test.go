package gitcred

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
)

const testPass = "ghp_s3cretValueNeverPrinted"

var testCreds = []Credential{
	{Host: "git.test", Port: 8443, Username: "x-access-token", Password: testPass},
	{Host: "example.com", Port: 443, Username: "bot", Password: "other-secret-value"},
}

const answer0 = "username=x-access-token\npassword=" + testPass + "\n"

// helperCases are requests and what the helper answers them: a credential
// only for protocol https and a configured host and port.
var helperCases = []struct {
	name, op, in, want string
}{
	{"configured host and port", "get", "protocol=https\nhost=git.test:8443\n\n", answer0},
	{"no blank line at the end", "get", "protocol=https\nhost=git.test:8443\n", answer0},
	{"no newline at the end", "get", "protocol=https\nhost=git.test:8443", answer0},
	{"upper case host", "get", "protocol=https\nhost=GIT.Test:8443\n", answer0},
	{"path and capabilities ignored", "get", "capability[]=authtype\ncapability[]=state\nprotocol=https\nhost=git.test:8443\npath=o/r.git\nwwwauth[]=Basic realm=\"x\"\nwwwauth[]=Bearer\n\n", answer0},
	{"configured user name", "get", "protocol=https\nhost=git.test:8443\nusername=x-access-token\n", answer0},
	{"default port", "get", "protocol=https\nhost=example.com\n", "username=bot\npassword=other-secret-value\n"},
	{"default port written", "get", "protocol=https\nhost=example.com:443\n", "username=bot\npassword=other-secret-value\n"},
	{"after the blank line ignored", "get", "protocol=https\nhost=git.test:8443\n\nhost=evil.test\n", answer0},

	{"store ignored", "store", "protocol=https\nhost=git.test:8443\nusername=u\npassword=p\n", ""},
	{"erase ignored", "erase", "protocol=https\nhost=git.test:8443\n", ""},
	{"unknown op ignored", "fill", "protocol=https\nhost=git.test:8443\n", ""},

	{"other host", "get", "protocol=https\nhost=evil.test:8443\n", ""},
	{"other port", "get", "protocol=https\nhost=git.test:8444\n", ""},
	{"default port of a host with another", "get", "protocol=https\nhost=git.test\n", ""},
	{"http", "get", "protocol=http\nhost=git.test:8443\n", ""},
	{"HTTPS upper case", "get", "protocol=HTTPS\nhost=git.test:8443\n", ""},
	{"ssh", "get", "protocol=ssh\nhost=git.test:8443\n", ""},
	{"no protocol", "get", "host=git.test:8443\n", ""},
	{"no host", "get", "protocol=https\n", ""},
	{"empty host", "get", "protocol=https\nhost=\n", ""},
	{"host with path", "get", "protocol=https\nhost=git.test:8443/x\n", ""},
	{"host with userinfo", "get", "protocol=https\nhost=evil@git.test:8443\n", ""},
	{"suffix of the host", "get", "protocol=https\nhost=git.test.evil.com:8443\n", ""},
	{"host a suffix", "get", "protocol=https\nhost=sub.git.test:8443\n", ""},
	{"trailing dot", "get", "protocol=https\nhost=git.test.:8443\n", ""},
	{"port with leading zero", "get", "protocol=https\nhost=git.test:08443\n", ""},
	{"port with sign", "get", "protocol=https\nhost=git.test:+8443\n", ""},
	{"two ports", "get", "protocol=https\nhost=git.test:8443:8443\n", ""},
	{"ipv6 literal", "get", "protocol=https\nhost=[::1]:8443\n", ""},
	{"kelvin sign folds to k", "get", "protocol=https\nhost=example.\u212aom\n", ""},
	{"carriage return", "get", "protocol=https\r\nhost=git.test:8443\r\n", ""},
	{"carriage return in host", "get", "protocol=https\nhost=git.test:8443\r\n", ""},
	{"NUL in host", "get", "protocol=https\nhost=git.test\x00:8443\n", ""},
	{"NUL anywhere", "get", "protocol=https\nhost=git.test:8443\npath=a\x00b\n", ""},
	{"duplicate host", "get", "protocol=https\nhost=evil.test\nhost=git.test:8443\n", ""},
	{"duplicate host reversed", "get", "protocol=https\nhost=git.test:8443\nhost=evil.test\n", ""},
	{"duplicate protocol", "get", "protocol=http\nprotocol=https\nhost=git.test:8443\n", ""},
	{"url form", "get", "url=https://git.test:8443/\n", ""},
	{"url beside parts", "get", "protocol=https\nhost=git.test:8443\nurl=https://evil.test/\n", ""},
	{"line without equals", "get", "protocol=https\nhost=git.test:8443\ngarbage\n", ""},
	{"empty key", "get", "protocol=https\nhost=git.test:8443\n=x\n", ""},
	{"other user name", "get", "protocol=https\nhost=git.test:8443\nusername=alice\n", ""},
	{"too long", "get", "protocol=https\nhost=git.test:8443\npath=" + strings.Repeat("a", MaxRequest) + "\n", ""},
	{"one long line", "get", strings.Repeat("x", MaxRequest+10), ""},
	{"empty", "get", "", ""},
}

func TestServe(t *testing.T) {
	for _, c := range helperCases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Serve(c.op, strings.NewReader(c.in), &out, testCreds)
			if out.String() != c.want {
				t.Fatalf("answer %q, want %q (err %v)", redact(out.String()), redact(c.want), err)
			}
			if c.want == "" && c.op == "get" && !errors.Is(err, ErrRequest) {
				t.Fatalf("a refusal without a reason: %v", err)
			}
			if err != nil && strings.Contains(err.Error(), testPass) {
				t.Fatal("the error carries the password")
			}
		})
	}
}

func redact(s string) string { return strings.ReplaceAll(s, testPass, "<password>") }

// A password or user name that would add a line to git's answer is
// never written.
func TestServeRefusesUnsafeValues(t *testing.T) {
	for _, c := range []Credential{
		{Host: "git.test", Port: 443, Username: "u", Password: "p\nhost=evil.test"},
		{Host: "git.test", Port: 443, Username: "u", Password: "p\x00q"},
		{Host: "git.test", Port: 443, Username: "u", Password: ""},
		{Host: "git.test", Port: 443, Username: "u\npassword=x", Password: "p"},
	} {
		var out bytes.Buffer
		if err := Serve("get", strings.NewReader("protocol=https\nhost=git.test\n"), &out, []Credential{c}); err == nil || out.Len() != 0 {
			t.Errorf("%q: answer %q, err %v", c.Username, out.String(), err)
		}
	}
}

func TestEnvRoundTrip(t *testing.T) {
	env := Env("/run/coily/bridge", testCreds)
	want := map[string]string{
		"GIT_CONFIG_COUNT": "3",
		"GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
		"GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": "/run/coily/bridge __git-credential",
		"GIT_CONFIG_KEY_2": "credential.useHttpPath", "GIT_CONFIG_VALUE_2": "false",
		"COILY_GIT_CRED_0": "git.test:8443", "COILY_GIT_USER_0": "x-access-token",
		"COILY_GIT_CRED_1": "example.com:443", "COILY_GIT_USER_1": "bot",
	}
	if !maps.Equal(env, want) {
		t.Fatalf("Env = %v\nwant %v", env, want)
	}
	for i, c := range testCreds {
		env[PasswordVar(i)] = c.Password
	}
	got, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || len(got) != 2 || got[0] != testCreds[0] || got[1] != testCreds[1] {
		t.Fatalf("FromEnv = %d credentials, %v", len(got), err)
	}
}

func TestFromEnvRefuses(t *testing.T) {
	base := map[string]string{"COILY_GIT_CRED_0": "git.test:443", "COILY_GIT_USER_0": "u", "COILY_GIT_PASS_0": testPass}
	for name, change := range map[string]map[string]string{
		"no port":           {"COILY_GIT_CRED_0": "git.test"},
		"bad host":          {"COILY_GIT_CRED_0": "git test:443"},
		"no user":           {"COILY_GIT_USER_0": ""},
		"newline in pass":   {"COILY_GIT_PASS_0": "a\nb"},
		"empty pass":        {"COILY_GIT_PASS_0": ""},
		"too many":          manyCreds(MaxCredentials + 1),
		"port out of range": {"COILY_GIT_CRED_0": "git.test:65536"},
	} {
		env := maps.Clone(base)
		maps.Copy(env, change)
		_, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if !errors.Is(err, ErrEnv) {
			t.Errorf("%s: err %v", name, err)
		} else if strings.Contains(err.Error(), testPass) || strings.Contains(err.Error(), "a\nb") {
			t.Errorf("%s: the error carries a password: %v", name, err)
		}
	}
	none, err := FromEnv(func(string) (string, bool) { return "", false })
	if err != nil || len(none) != 0 {
		t.Fatalf("no credentials: %v %v", none, err)
	}
}

func manyCreds(n int) map[string]string {
	env := map[string]string{}
	for i := range n {
		env[hostVar(i)], env[userVar(i)], env[PasswordVar(i)] = "h.test:443", "u", "p"
	}
	return env
}

// FuzzServe: whatever git (or anything in the sandbox) writes, the helper
// answers with a credential only for a request ParseRequest and Match
// accept, only with that credential's two lines, and never panics.
func FuzzServe(f *testing.F) {
	for _, c := range helperCases {
		f.Add(c.op, c.in)
	}
	f.Fuzz(func(t *testing.T, op, in string) {
		var out bytes.Buffer
		err := Serve(op, strings.NewReader(in), &out, testCreds)
		if out.Len() == 0 {
			return
		}
		if err != nil || op != "get" {
			t.Fatalf("answered %q with err %v for op %q", redact(out.String()), err, op)
		}
		req, perr := ParseRequest(strings.NewReader(in))
		if perr != nil || req.Protocol != "https" {
			t.Fatalf("answered a request ParseRequest refuses: %v", perr)
		}
		c, merr := Match(req, testCreds)
		if merr != nil || out.String() != "username="+c.Username+"\npassword="+c.Password+"\n" {
			t.Fatalf("answer %q does not match the credential for %s:%d", redact(out.String()), req.Host, req.Port)
		}
		if !strings.EqualFold(hostLine(in), c.Host) && !strings.EqualFold(hostLine(in), c.Address()) {
			t.Fatalf("answered for host %q with the credential of %s", hostLine(in), c.Address())
		}
	})
}

// hostLine is the value of the first host= line of a request.
func hostLine(in string) string {
	for line := range strings.Lines(in) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return ""
		}
		if v, ok := strings.CutPrefix(line, "host="); ok {
			return v
		}
	}
	return ""
}
