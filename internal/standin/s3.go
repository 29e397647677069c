package standin

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// AWSHint says how to install the AWS CLI the S3 stand-in is tested with.
const AWSHint = "install the Debian package awscli (scripts/test.sh does)"

// AWSPath is where the Debian package installs the AWS CLI (a pyenv or
// pip `aws` earlier on PATH is another program).
const AWSPath = "/usr/bin/aws"

// s3Created is the creation and modification time of every bucket and
// object of the stand-in.
var s3Created = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// S3Server is a local HTTPS stand-in for Amazon S3, enough for `aws s3
// ls` and `aws s3 cp` of small files (awscli 2.9) and the AWS SDK for
// Go's uploads: ListBuckets, ListObjectsV2, PutObject, GetObject,
// HeadObject and multipart uploads in memory, path-style. A PutObject or
// UploadPart may come aws-chunked with a checksum trailer
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER, the AWS SDKs' default). It accepts
// only requests signed (SigV4, header form, with X-Amz-Content-Sha256)
// with a key of its AWSKeys, in any region: a long-term key, or a
// temporary one STS issued, with its session token.
type S3Server struct {
	*Server
	AccessKey string   // the long-term key S3 was started with ("" for S3WithKeys)
	Keys      *AWSKeys // the keys it accepts

	secret  string
	buckets map[string][]string // bucket → sorted keys
	objects map[string][]byte   // "bucket/key" → the body PutObject stored

	mu       sync.Mutex
	disagree []string // DisagreeOn's path prefixes
	requests []string
	used     []string // the access key of each request served
	received []byte   // every request received: its line, headers and body

	uploads    map[string]*s3Upload // multipart uploads in progress, by id
	nextUpload int
}

// S3 starts an S3 stand-in for t that accepts accessKey and secret and
// holds buckets (name → object keys), with a certificate also valid for
// hosts.
func S3(t testing.TB, accessKey, secret string, buckets map[string][]string, hosts ...string) *S3Server {
	t.Helper()
	keys := NewAWSKeys()
	keys.Add(accessKey, secret)
	s := S3WithKeys(t, keys, buckets, hosts...)
	s.AccessKey, s.secret = accessKey, secret
	return s
}

// S3WithKeys starts an S3 stand-in for t that accepts the keys of keys
// (shared with an STS stand-in, which adds the temporary keys it issues)
// and holds buckets, with a certificate also valid for hosts.
func S3WithKeys(t testing.TB, keys *AWSKeys, buckets map[string][]string, hosts ...string) *S3Server {
	t.Helper()
	s := &S3Server{Keys: keys, buckets: map[string][]string{}, objects: map[string][]byte{}}
	for b, keys := range buckets {
		s.buckets[b] = slices.Sorted(slices.Values(keys))
	}
	s.Server = TLS(t).Serve(t, s.handler(t), hosts...)
	return s
}

// Env returns the environment that lets the AWS CLI reach the stand-in
// with its credentials (those S3 was started with; none for S3WithKeys),
// trusting its CA, with no configuration file and no instance metadata
// lookups. Callers pass --endpoint-url s.URL.
func (s *S3Server) Env(t testing.TB) []string {
	var creds []string
	if s.AccessKey != "" {
		creds = []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.secret}
	}
	return append(creds,
		"AWS_CA_BUNDLE="+s.CAFile,
		"AWS_DEFAULT_REGION=us-east-1",
		"AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_PAGER=",
		"HOME="+t.TempDir(),
	)
}

// Requests returns one line per request served, in order: "GET /
// ListBuckets", "GET /bucket ListObjectsV2 prefix=p delimiter=/", and
// "403 …" for refused ones, "501 …" for ones it does not answer.
func (s *S3Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// AccessKeys returns the access key of each request served (not of
// those refused), in order.
func (s *S3Server) AccessKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.used...)
}

// Received reports whether a request the stand-in received (served or
// refused) carried sub in its URL, a header, an HTTP trailer or its body: whether a
// placeholder, say, reached S3.
func (s *S3Server) Received(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(string(s.received), sub)
}

func (s *S3Server) receive(r *http.Request, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = append(s.received, r.Method+" "+r.URL.String()+"\n"...)
	for _, h := range []http.Header{r.Header, r.Trailer} { // the trailer: read with the body
		for k, vs := range h {
			s.received = append(s.received, k+": "+strings.Join(vs, ", ")+"\n"...)
		}
	}
	s.received = append(append(s.received, body...), '\n')
}

func (s *S3Server) record(line string) {
	s.mu.Lock()
	s.requests = append(s.requests, line)
	s.mu.Unlock()
}

func (s *S3Server) handler(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			s3Error(w, http.StatusBadRequest, "IncompleteBody", "could not read the body")
			return
		}
		s.receive(r, body)
		if r.Header.Get("X-Amz-Content-Sha256") == "" {
			s.record("400 " + line + " MissingContentSha256")
			s3Error(w, http.StatusBadRequest, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
			return
		}
		sum := sha256.Sum256(body)
		a, code, err := s.Keys.authenticate(r, hex.EncodeToString(sum[:]), time.Now())
		if err == nil && s.disagrees(r.URL.Path) {
			code, err = "SignatureDoesNotMatch", errors.New("the stand-in disagrees on the signature of this path")
		}
		if err != nil {
			// The reason names no secret: it is one of authenticate's fixed sentences.
			s.record("403 " + line + " " + code + ": " + err.Error())
			writeAuthError(w, r, code, hex.EncodeToString(sum[:]))
			return
		}
		s.mu.Lock()
		s.used = append(s.used, a.AccessKey)
		s.mu.Unlock()
		if r.Header.Get("X-Amz-Content-Sha256") == streamingUnsignedTrailer {
			data, _, err := decodeAWSChunked(r.Header, body)
			if err != nil {
				s.record("400 " + line + " InvalidChunkedBody: " + err.Error())
				s3Error(w, http.StatusBadRequest, "InvalidRequest", "The aws-chunked body could not be decoded: "+err.Error())
				return
			}
			body = data
		}
		bucket := strings.Trim(r.URL.Path, "/")
		switch {
		case r.Method == http.MethodGet && bucket == "":
			s.record(line + " ListBuckets")
			s.listBuckets(w)
		case r.Method == http.MethodGet && !strings.Contains(bucket, "/") && r.URL.Query().Get("list-type") == "2":
			q := r.URL.Query()
			s.record(fmt.Sprintf("%s ListObjectsV2 prefix=%s delimiter=%s", line, q.Get("prefix"), q.Get("delimiter")))
			s.listObjects(w, bucket, q)
		case strings.Contains(bucket, "/") && objectQuery(r.URL.RawQuery) && s.object(w, r, line, body):
		case strings.Contains(bucket, "/") && s.multipart(w, r, line, body):
		default:
			s.record("501 " + line + " " + r.URL.RawQuery)
			t.Logf("standin s3: unanswered %s %s?%s", r.Method, r.URL.Path, r.URL.RawQuery)
			s3Error(w, http.StatusNotImplemented, "NotImplemented", "The stand-in does not answer this request.")
		}
	})
}

// objectQuery reports a query an object request may carry: none, or the
// operation name the AWS SDK for Go adds (x-id=PutObject).
func objectQuery(q string) bool {
	op, ok := strings.CutPrefix(q, "x-id=")
	return q == "" || ok && (op == "PutObject" || op == "GetObject")
}

// object answers PutObject, GetObject and HeadObject on r's path
// ("/bucket/key"), recording the payload hash form of a put; false for
// other methods.
func (s *S3Server) object(w http.ResponseWriter, r *http.Request, line string, body []byte) bool {
	name := strings.TrimPrefix(r.URL.Path, "/")
	bucket, _, _ := strings.Cut(name, "/")
	s.mu.Lock()
	_, bucketOK := s.buckets[bucket]
	data, found := s.objects[name]
	s.mu.Unlock()
	switch {
	case r.Method != http.MethodPut && r.Method != http.MethodGet && r.Method != http.MethodHead:
		return false
	case !bucketOK:
		s.record("404 " + line + " NoSuchBucket")
		s3Error(w, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
	case r.Method == http.MethodPut:
		payload := payloadForm(r)
		if md := r.Header.Get("Content-Md5"); md != "" && md != base64MD5(body) {
			s.record("400 " + line + " BadDigest")
			s3Error(w, http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
			return true
		}
		s.mu.Lock()
		s.objects[name] = body
		s.mu.Unlock()
		s.record(fmt.Sprintf("%s PutObject %d bytes payload=%s", line, len(body), payload))
		w.Header().Set("ETag", `"`+hexMD5(body)+`"`)
		w.WriteHeader(http.StatusOK)
	case !found:
		s.record("404 " + line + " NoSuchKey")
		s3Error(w, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	default:
		s.record(fmt.Sprintf("%s %sObject", line, map[string]string{http.MethodGet: "Get", http.MethodHead: "Head"}[r.Method]))
		w.Header().Set("ETag", `"`+hexMD5(data)+`"`)
		w.Header().Set("Last-Modified", s3Created.Format(http.TimeFormat))
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.Header().Set("Content-Type", "binary/octet-stream")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(data)
		}
	}
	return true
}

// DisagreeOn makes the stand-in refuse every request whose path starts
// with prefix with SignatureDoesNotMatch (and its echo of the request's
// credentials) even when its signature verifies: as a service would whose
// canonical form a re-signing proxy got wrong in a way no test foresaw.
func (s *S3Server) DisagreeOn(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disagree = append(s.disagree, prefix)
}

func (s *S3Server) disagrees(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.disagree {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Object returns what PutObject stored under bucket/key.
func (s *S3Server) Object(bucket, key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[bucket+"/"+key]
	return b, ok
}

func hexMD5(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

func base64MD5(b []byte) string {
	sum := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// s3Messages are S3's messages for the refusals the stand-in answers.
var s3Messages = map[string]string{
	"InvalidAccessKeyId":    "The AWS Access Key Id you provided does not exist in our records.",
	"SignatureDoesNotMatch": "The request signature we calculated does not match the signature you provided.",
	"InvalidToken":          "The provided token is malformed or otherwise invalid.",
	"ExpiredToken":          "The provided token has expired.",
}

const s3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

type s3Owner struct {
	ID          string
	DisplayName string
}

func (s *S3Server) listBuckets(w http.ResponseWriter) {
	type bucket struct {
		Name         string
		CreationDate string
	}
	res := struct {
		XMLName xml.Name `xml:"ListAllMyBucketsResult"`
		Xmlns   string   `xml:"xmlns,attr"`
		Owner   s3Owner
		Buckets []bucket `xml:"Buckets>Bucket"`
	}{Xmlns: s3Namespace, Owner: s3Owner{ID: "standin-owner", DisplayName: "standin"}}
	for _, name := range slices.Sorted(maps.Keys(s.buckets)) {
		res.Buckets = append(res.Buckets, bucket{Name: name, CreationDate: s3Created.Format(time.RFC3339)})
	}
	writeXML(w, http.StatusOK, res)
}

type s3Object struct {
	Key          string
	LastModified string
	ETag         string
	Size         int
	StorageClass string
}

type s3Prefix struct {
	Prefix string
}

// listObjects answers ListObjectsV2 with every key (no pagination):
// those under prefix, rolled up at the first delimiter after it.
func (s *S3Server) listObjects(w http.ResponseWriter, bucket string, q url.Values) {
	keys, ok := s.buckets[bucket]
	if !ok {
		s3Error(w, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	enc := func(k string) string { return k }
	encType := ""
	if q.Get("encoding-type") == "url" {
		enc, encType = url.QueryEscape, "url"
	}
	res := struct {
		XMLName        xml.Name `xml:"ListBucketResult"`
		Xmlns          string   `xml:"xmlns,attr"`
		Name           string
		Prefix         string
		Delimiter      string `xml:",omitempty"`
		EncodingType   string `xml:",omitempty"`
		MaxKeys        int
		KeyCount       int
		IsTruncated    bool
		Contents       []s3Object
		CommonPrefixes []s3Prefix
	}{Xmlns: s3Namespace, Name: bucket, Prefix: enc(prefix), Delimiter: enc(delim), EncodingType: encType, MaxKeys: 1000}
	seen := map[string]bool{}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		if i := strings.Index(rest, delim); delim != "" && i >= 0 {
			p := prefix + rest[:i+len(delim)]
			if !seen[p] {
				seen[p] = true
				res.CommonPrefixes = append(res.CommonPrefixes, s3Prefix{enc(p)})
			}
			continue
		}
		etag := md5.Sum([]byte(k))
		res.Contents = append(res.Contents, s3Object{Key: enc(k), LastModified: s3Created.Format("2006-01-02T15:04:05.000Z"),
			ETag: `"` + hex.EncodeToString(etag[:]) + `"`, Size: len(k), StorageClass: "STANDARD"})
	}
	res.KeyCount = len(res.Contents) + len(res.CommonPrefixes)
	writeXML(w, http.StatusOK, res)
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	writeXML(w, status, struct {
		XMLName xml.Name `xml:"Error"`
		Code    string
		Message string
	}{Code: code, Message: msg})
}

func writeXML(w http.ResponseWriter, status int, v any) {
	out, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(out)
}
