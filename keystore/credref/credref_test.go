package credref

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// refCases are ParseRef's table and FuzzParseRef's seeds; a zero want
// means the reference is refused.
var refCases = []struct {
	in   string
	want Ref
}{
	{"vault:secret/coily/github#token", Ref{Vault, "secret/coily/github", "token"}},
	{"vault:kv#f", Ref{Vault, "kv", "f"}},
	{"vault:a.b/c_d/e-f/1#field/with:colons=and/slashes", Ref{Vault, "a.b/c_d/e-f/1", "field/with:colons=and/slashes"}},
	{"vault:a/...#f", Ref{Vault, "a/...", "f"}},
	{"keychain:coily/github", Ref{Keychain, "coily", "github"}},
	{"keychain:svc/acct/more", Ref{Keychain, "svc", "acct/more"}},
	{"keychain:com.example.svc/user@example.com", Ref{Keychain, "com.example.svc", "user@example.com"}},
	{"keychain:dienst/konto-ä", Ref{Keychain, "dienst", "konto-ä"}},
	{"file:github", Ref{File, "github", ""}},
	{"file:npm.token_2-x", Ref{File, "npm.token_2-x", ""}},
	{"file:...", Ref{File, "...", ""}},

	{"", Ref{}},
	{":", Ref{}},
	{"github", Ref{}},
	{"secret/coily/github#token", Ref{}},
	{"s3:bucket/key", Ref{}},
	{"VAULT:secret/a#b", Ref{}},
	{" vault:secret/a#b", Ref{}},
	{"vault:secret/a#b ", Ref{}},
	{"vault:", Ref{}},
	{"vault:secret", Ref{}},
	{"vault:#f", Ref{}},
	{"vault:a#", Ref{}},
	{"vault:a#b#c", Ref{}},
	{"vault:a/../b#f", Ref{}},
	{"vault:../b#f", Ref{}},
	{"vault:a/./b#f", Ref{}},
	{"vault:a//b#f", Ref{}},
	{"vault:/a#f", Ref{}},
	{"vault:a/#f", Ref{}},
	{"vault:a b#f", Ref{}},
	{"vault:a#f g", Ref{}},
	{"vault:a\tb#f", Ref{}},
	{"vault:a#f\n", Ref{}},
	{"vault:a#f\x00", Ref{}},
	{"vault:a#f\x7f", Ref{}},
	{"vault:a#f\u0085", Ref{}},
	{"vault:a#f\xff", Ref{}},
	{"vault:a\\b#f", Ref{}},
	{"vault:ä#f", Ref{}},
	{"vault:a%2F..#f", Ref{}},
	{"vault:secret/" + strings.Repeat("a", 1100) + "#f", Ref{}},
	{"keychain:", Ref{}},
	{"keychain:svc", Ref{}},
	{"keychain:svc/", Ref{}},
	{"keychain:/acct", Ref{}},
	{"keychain:/", Ref{}},
	{"keychain:svc acct/x", Ref{}},
	{"keychain:svc/\x1b[31m", Ref{}},
	{"file:", Ref{}},
	{"file:../x", Ref{}},
	{"file:..", Ref{}},
	{"file:.", Ref{}},
	{"file:a/b", Ref{}},
	{"file:/etc/passwd", Ref{}},
	{"file:a#b", Ref{}},
	{"file:a b", Ref{}},
	{"file:ä", Ref{}},
	{"file:a\x00", Ref{}},
	{"file:" + strings.Repeat("a", 1020), Ref{}}, // 1025 bytes
}

func TestParseRef(t *testing.T) {
	for _, tc := range refCases {
		got, err := Parse(tc.in)
		switch {
		case tc.want == (Ref{}) && err == nil:
			t.Errorf("Parse(%q) = %#v, want an error", tc.in, got)
		case tc.want != (Ref{}) && err != nil:
			t.Errorf("Parse(%q): %v", tc.in, err)
		case err == nil && got != tc.want:
			t.Errorf("Parse(%q) = %#v, want %#v", tc.in, got, tc.want)
		case err != nil && got != (Ref{}):
			t.Errorf("Parse(%q) = %#v with an error", tc.in, got)
		case err == nil && got.String() != tc.in:
			t.Errorf("Parse(%q).String() = %q", tc.in, got.String())
		}
		if err != nil && !utf8.ValidString(err.Error()) {
			t.Errorf("Parse(%q): error %q is not valid UTF-8", tc.in, err)
		}
	}
	// Exactly the limit is fine.
	long := "file:" + strings.Repeat("a", maxRefLen-len("file:"))
	if _, err := Parse(long); err != nil {
		t.Errorf("ParseRef of %d bytes: %v", len(long), err)
	}
}

func FuzzParseRef(f *testing.F) {
	for _, tc := range refCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if r != (Ref{}) {
				t.Fatalf("Parse(%q) = %#v with an error", s, r)
			}
			return
		}
		if len(s) > maxRefLen || !utf8.ValidString(s) || strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			t.Fatalf("Parse(%q) accepted", s)
		}
		if r.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, r.String())
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("Parse(%q) = %#v, then %#v, %v", s, r, again, err)
		}
		switch r.Backend {
		case Vault, Keychain:
			if r.Path == "" || r.Field == "" {
				t.Fatalf("Parse(%q) = %#v: empty part", s, r)
			}
		case File:
			if !ValidName([]byte(r.Path)) || r.Path == "." || r.Path == ".." || r.Field != "" {
				t.Fatalf("Parse(%q) = %#v", s, r)
			}
		default:
			t.Fatalf("Parse(%q): backend %q", s, r.Backend)
		}
		if r.Backend == Vault {
			for seg := range strings.SplitSeq(r.Path, "/") {
				if seg == "" || seg == "." || seg == ".." || !ValidName([]byte(seg)) {
					t.Fatalf("Parse(%q): path segment %q", s, seg)
				}
			}
		}
	})
}

// A secret pasted where its reference belongs is never quoted back: errors
// reach logs and terminals.
func TestParseDoesNotEchoSecrets(t *testing.T) {
	for _, s := range []string{
		"ghp_plaintexttoken1234567890",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----\n",
		"LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==",
		"user:hunter2hunter2",
		"AKIAEXAMPLE:wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
		"secret value with spaces",
	} {
		_, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", s)
			continue
		}
		for _, part := range []string{s, "plaintexttoken", "MIIEowIBAAKCAQEAu1SU1", "LS0tLS1CRUdJT", "hunter2", "wJalrXUtnFEMI", "with spaces"} {
			if strings.Contains(s, part) && strings.Contains(err.Error(), part) {
				t.Errorf("Parse(%q) error quotes it: %v", s, err)
			}
		}
	}
}
