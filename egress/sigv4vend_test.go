package egress

import (
	"net/url"
	"testing"
)

var stsActionCases = []struct {
	query, body string
	ok          bool
}{
	{"", "Action=GetCallerIdentity&Version=2011-06-15", true},
	{"Action=GetAccessKeyInfo&AccessKeyId=AKID", "", true},
	{"", "Action=GetSessionToken", false},
	{"", "Action=AssumeRole&RoleArn=x", false},
	{"Action=GetFederationToken", "", false},
	{"", "", false},
	{"Action=GetCallerIdentity", "Action=GetCallerIdentity", false},
	{"", "Action=GetCallerIdentity&Action=AssumeRole", false},
	{"", "action=AssumeRole", false},
	{"", "Action=getcalleridentity", false},
	{"", "Action=%47etCallerIdentity", true},
	{"", "Action=GetCallerIdentity;Action=AssumeRole", false},
	{"", "Action=GetCallerIdentity&x=%zz", false},
	{"%41ction=AssumeRole", "", false},
}

func TestCheckSTSAction(t *testing.T) {
	for _, c := range stsActionCases {
		if err := checkSTSAction(c.query, []byte(c.body)); (err == nil) != c.ok {
			t.Errorf("query %q body %q: %v, want ok=%v", c.query, c.body, err, c.ok)
		}
	}
}

func TestHasQueryKey(t *testing.T) {
	for q, want := range map[string]bool{
		"session": true, "session=": true, "a=1&session": true, "%73ession": true, "SESSION": true,
		"sessions": false, "x=session": false, "": false, "a;session=1": true,
	} {
		if got := hasQueryKey(q, "session"); got != want {
			t.Errorf("%q: %v, want %v", q, got, want)
		}
	}
}

// FuzzCheckSTSAction: an accepted request names exactly one action, an
// allowed one, as AWS reads the parameters.
func FuzzCheckSTSAction(f *testing.F) {
	for _, c := range stsActionCases {
		f.Add(c.query, c.body)
	}
	f.Fuzz(func(t *testing.T, query, body string) {
		if checkSTSAction(query, []byte(body)) != nil {
			return
		}
		q, _ := url.ParseQuery(query)
		b, _ := url.ParseQuery(body)
		acts := append(q["Action"], b["Action"]...)
		if len(acts) != 1 || !stsAllowed[acts[0]] {
			t.Fatalf("accepted %q %q: actions %q", query, body, acts)
		}
	})
}
