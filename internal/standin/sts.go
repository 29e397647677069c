package standin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// STSServer is a local HTTPS stand-in for AWS STS over its query protocol
// (form-encoded POST, XML answers), enough for Vault's AWS secrets engine:
// GetCallerIdentity, AssumeRole and GetFederationToken. It accepts only
// requests signed (SigV4, service sts) with a long-term key of its
// AWSKeys, and adds the temporary keys it issues to them, so that an S3
// stand-in sharing the AWSKeys accepts them, with their session tokens,
// until they expire.
type STSServer struct {
	*Server
	Keys *AWSKeys

	mu    sync.Mutex
	calls []string
}

// STS starts an STS stand-in for t over keys, with a certificate also
// valid for hosts.
func STS(t testing.TB, keys *AWSKeys, hosts ...string) *STSServer {
	t.Helper()
	s := &STSServer{Keys: keys}
	s.Server = TLS(t).Serve(t, http.HandlerFunc(s.serve), hosts...)
	return s
}

// Calls returns one line per request: "GetCallerIdentity AKID", "AssumeRole
// AKID arn:… → ASIA…", or "403 Code: reason" / "400 Code: reason" for
// refused ones. No line holds a secret or a session token.
func (s *STSServer) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *STSServer) record(line string) {
	s.mu.Lock()
	s.calls = append(s.calls, line)
	s.mu.Unlock()
}

// stsNamespace is the XML namespace of STS's answers.
const stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// stsAccount is the account id of every ARN the stand-in hands out.
const stsAccount = "123456789012"

func (s *STSServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil || len(body) > 64<<10 {
		s.refuse(w, http.StatusBadRequest, "InvalidRequest", errors.New("body unreadable or larger than 64 KiB"))
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" || r.URL.RawQuery != "" {
		s.refuse(w, http.StatusBadRequest, "InvalidAction", errors.New("not a POST of a form to /"))
		return
	}
	sum := sha256.Sum256(body)
	now := time.Now()
	a, code, err := s.Keys.authenticate(r, hex.EncodeToString(sum[:]), now)
	switch {
	case err != nil:
		s.refuse(w, http.StatusForbidden, code, err)
		return
	case a.Service != "sts":
		s.refuse(w, http.StatusForbidden, "SignatureDoesNotMatch", fmt.Errorf("signed for service %q, not sts", a.Service))
		return
	case s.Keys.temporary(a.AccessKey):
		// Vault calls with its long-term (root) key; a temporary key
		// may not get another (GetFederationToken refuses it).
		s.refuse(w, http.StatusForbidden, "AccessDenied", errors.New("a temporary key may not call STS here"))
		return
	}
	req, err := parseSTSRequest(string(body))
	if err != nil {
		s.refuse(w, http.StatusBadRequest, "ValidationError", err)
		return
	}
	switch req.Action {
	case "GetCallerIdentity":
		s.record("GetCallerIdentity " + a.AccessKey)
		writeXML(w, http.StatusOK, stsCallerIdentity(a.AccessKey))
	case "AssumeRole", "GetFederationToken":
		id, secret, token, exp := s.Keys.issue(req.Action, a.AccessKey, req.subject(), req.Duration, now)
		s.record(fmt.Sprintf("%s %s %s %s → %s", req.Action, a.AccessKey, req.subject(), req.Duration, id))
		writeXML(w, http.StatusOK, req.answer(stsCredentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token,
			Expiration: exp.Format(time.RFC3339)}))
	}
}

func (s *STSServer) refuse(w http.ResponseWriter, status int, code string, why error) {
	// The reason names no secret: it is one of authenticate's or
	// parseSTSRequest's sentences, which quote no value but names.
	s.record(fmt.Sprintf("%d %s: %v", status, code, why))
	writeXML(w, status, struct {
		XMLName xml.Name `xml:"ErrorResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		Error   struct {
			Type    string
			Code    string
			Message string
		}
		RequestID string `xml:"RequestId"`
	}{Xmlns: stsNamespace, Error: struct {
		Type    string
		Code    string
		Message string
	}{"Sender", code, why.Error()}, RequestID: randomID(16)})
}

// stsRequest is a parsed STS call.
type stsRequest struct {
	Action      string
	RoleArn     string // AssumeRole
	SessionName string // AssumeRole
	Name        string // GetFederationToken
	Duration    time.Duration
}

func (q stsRequest) subject() string {
	if q.Action == "AssumeRole" {
		return q.RoleArn + " session=" + q.SessionName
	}
	return "federated-user/" + q.Name
}

var (
	stsRoleArn  = regexp.MustCompile(`^arn:aws:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$`)
	stsNameChar = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]+$`)
)

// stsSingle are the parameters that may appear once at most; others
// (Tags, PolicyArns, Policy…) are ignored.
var stsSingle = []string{"Action", "Version", "RoleArn", "RoleSessionName", "Name", "DurationSeconds", "Policy", "ExternalId"}

// parseSTSRequest parses a form-encoded STS call as STS checks it: a
// known Action of API version 2011-06-15, each parameter once, and the
// action's required parameters within AWS's bounds.
func parseSTSRequest(body string) (stsRequest, error) {
	form, err := url.ParseQuery(body)
	if err != nil {
		return stsRequest{}, errors.New("the body is not a form")
	}
	for _, k := range stsSingle {
		if len(form[k]) > 1 {
			return stsRequest{}, fmt.Errorf("parameter %s given more than once", k)
		}
	}
	if v := form.Get("Version"); v != "2011-06-15" {
		return stsRequest{}, errors.New("version is not 2011-06-15")
	}
	q := stsRequest{Action: form.Get("Action")}
	minD, maxD := 900, 43200
	switch q.Action {
	case "GetCallerIdentity":
		return q, nil
	case "AssumeRole":
		q.RoleArn, q.SessionName = form.Get("RoleArn"), form.Get("RoleSessionName")
		if !stsRoleArn.MatchString(q.RoleArn) {
			return stsRequest{}, errors.New("RoleArn is not the ARN of an IAM role")
		}
		if l := len(q.SessionName); l < 2 || l > 64 || !stsNameChar.MatchString(q.SessionName) {
			return stsRequest{}, errors.New("RoleSessionName must be 2 to 64 of A-Z a-z 0-9 +=,.@_-")
		}
	case "GetFederationToken":
		q.Name = form.Get("Name")
		if l := len(q.Name); l < 2 || l > 32 || !stsNameChar.MatchString(q.Name) {
			return stsRequest{}, errors.New("name must be 2 to 32 of A-Z a-z 0-9 +=,.@_-")
		}
		maxD = 129600
	default:
		return stsRequest{}, errors.New("unknown action")
	}
	q.Duration = time.Hour
	if d := form.Get("DurationSeconds"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < minD || n > maxD || strconv.Itoa(n) != d {
			return stsRequest{}, fmt.Errorf("DurationSeconds must be a whole number from %d to %d", minD, maxD)
		}
		q.Duration = time.Duration(n) * time.Second
	}
	return q, nil
}

type stsCredentials struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string
	SessionToken    string
	Expiration      string
}

type stsMetadata struct {
	RequestID string `xml:"RequestId"`
}

// answer is the XML answer to an AssumeRole or GetFederationToken call.
func (q stsRequest) answer(c stsCredentials) any {
	meta := stsMetadata{RequestID: randomID(16)}
	if q.Action == "AssumeRole" {
		type user struct {
			AssumedRoleID string `xml:"AssumedRoleId"`
			Arn           string
		}
		role := q.RoleArn[len("arn:aws:iam::"+stsAccount+":role/"):]
		return struct {
			XMLName xml.Name `xml:"AssumeRoleResponse"`
			Xmlns   string   `xml:"xmlns,attr"`
			Result  struct {
				Credentials     stsCredentials
				AssumedRoleUser user
			} `xml:"AssumeRoleResult"`
			ResponseMetadata stsMetadata
		}{Xmlns: stsNamespace, Result: struct {
			Credentials     stsCredentials
			AssumedRoleUser user
		}{c, user{"AROA" + randomID(16) + ":" + q.SessionName,
			"arn:aws:sts::" + stsAccount + ":assumed-role/" + role + "/" + q.SessionName}}, ResponseMetadata: meta}
	}
	type fed struct {
		FederatedUserID string `xml:"FederatedUserId"`
		Arn             string
	}
	return struct {
		XMLName xml.Name `xml:"GetFederationTokenResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		Result  struct {
			Credentials      stsCredentials
			FederatedUser    fed
			PackedPolicySize int
		} `xml:"GetFederationTokenResult"`
		ResponseMetadata stsMetadata
	}{Xmlns: stsNamespace, Result: struct {
		Credentials      stsCredentials
		FederatedUser    fed
		PackedPolicySize int
	}{c, fed{stsAccount + ":" + q.Name, "arn:aws:sts::" + stsAccount + ":federated-user/" + q.Name}, 1}, ResponseMetadata: meta}
}

// stsCallerIdentity is the answer to GetCallerIdentity for a long-term key.
func stsCallerIdentity(accessKey string) any {
	return struct {
		XMLName xml.Name `xml:"GetCallerIdentityResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		Result  struct {
			Arn     string
			UserID  string `xml:"UserId"`
			Account string
		} `xml:"GetCallerIdentityResult"`
		ResponseMetadata stsMetadata
	}{Xmlns: stsNamespace, Result: struct {
		Arn     string
		UserID  string `xml:"UserId"`
		Account string
	}{"arn:aws:iam::" + stsAccount + ":user/vault-root", accessKey, stsAccount}, ResponseMetadata: stsMetadata{RequestID: randomID(16)}}
}
