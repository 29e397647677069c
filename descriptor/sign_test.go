package descriptor

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/refusal"
)

// The worked example of docs/protocol.md: testdata/example-request.yaml,
// signed with testdata/example.key (bytes 0x00..0x1f).
const (
	goldenCanonical = `{"argv":["git","log","--oneline","-n","5"],"created_at":"2026-03-01T12:00:00Z","cwd":"repo","env":{"GIT_PAGER":"cat","LC_ALL":"C"},"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"q3Jx0bTfWv1kY8mZp2sN4g","note":"show recent commits","sandbox":"build-agent","timeout":120,"version":1}`
	goldenHMAC      = "cef49c7baa38719c34cec43a40ecc3d1203b8b5622d2365048f6e8c3c18b3399"
)

func goldenRequest() *Request {
	return &Request{
		ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Nonce: "q3Jx0bTfWv1kY8mZp2sN4g", Sandbox: "build-agent",
		Argv: []string{"git", "log", "--oneline", "-n", "5"}, Cwd: "repo",
		Env: map[string]string{"GIT_PAGER": "cat", "LC_ALL": "C"}, Timeout: 120 * time.Second, Note: "show recent commits",
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenExample(t *testing.T) {
	key, err := hex.DecodeString(strings.TrimSpace(string(readFile(t, "testdata/example.key"))))
	if err != nil || !bytes.Equal(key, testKey()) {
		t.Fatalf("example.key: %x, %v", key, err)
	}
	if got := readFile(t, "testdata/example-request.canonical.json"); string(got) != goldenCanonical {
		t.Errorf("example-request.canonical.json:\n got %s\nwant %s", got, goldenCanonical)
	}
	r, canonical, err := ParseRequest(readFile(t, "testdata/example-request.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(canonical) != goldenCanonical {
		t.Errorf("canonical:\n got %s\nwant %s", canonical, goldenCanonical)
	}
	if r.HMAC != goldenHMAC || Sign(canonical, key) != goldenHMAC {
		t.Errorf("hmac %s, Sign %s, want %s", r.HMAC, Sign(canonical, key), goldenHMAC)
	}
	if err := Verify(canonical, r.HMAC, key); err != nil {
		t.Error(err)
	}
	want := goldenRequest()
	want.Version, want.CreatedAtRaw, want.HMAC = 1, "2026-03-01T12:00:00Z", goldenHMAC
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	// MarshalRequest writes the same request as testdata/example-request.json.
	out, err := MarshalRequest(goldenRequest(), key)
	if err != nil {
		t.Fatal(err)
	}
	wantFile := strings.Replace(goldenCanonical, `"env":{"GIT_PAGER":"cat","LC_ALL":"C"},`, `"env":{"GIT_PAGER":"cat","LC_ALL":"C"},"hmac":"`+goldenHMAC+`",`, 1) + "\n"
	if string(out) != wantFile || !bytes.Equal(out, readFile(t, "testdata/example-request.json")) {
		t.Errorf("MarshalRequest:\n got %s\nwant %s", out, wantFile)
	}
}

func TestSignVerify(t *testing.T) {
	key := testKey()
	out, err := MarshalRequest(goldenRequest(), key)
	if err != nil {
		t.Fatal(err)
	}
	r, canonical, err := ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(canonical, r.HMAC, key); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	hmacFail := func(name string, err error) {
		t.Helper()
		if e := asError(t, err); e.Code != CodeHMACFail {
			t.Errorf("%s: %v, want hmac-fail", name, err)
		}
	}
	// A tampered body: the same signature over a changed request.
	tampered := bytes.Replace(out, []byte(`"--oneline"`), []byte(`"--all"`), 1)
	_, tc, err := ParseRequest(tampered)
	if err != nil {
		t.Fatal(err)
	}
	hmacFail("tampered", Verify(tc, r.HMAC, key))
	hmacFail("tampered canonical", Verify(append(canonical[:len(canonical):len(canonical)], ' '), r.HMAC, key))
	wrong := testKey()
	wrong[31] ^= 1
	hmacFail("wrong key", Verify(canonical, r.HMAC, wrong))
	hmacFail("upper-case", Verify(canonical, strings.ToUpper(r.HMAC), key))
	hmacFail("short", Verify(canonical, r.HMAC[:62], key))
	hmacFail("long", Verify(canonical, r.HMAC+"00", key))
	hmacFail("empty", Verify(canonical, "", key))
	hmacFail("not hex", Verify(canonical, strings.Repeat("g", 64), key))
	// A file whose hmac was edited.
	flipped := strings.Replace(string(out), r.HMAC[:4], "0000", 1)
	fr, fc, err := ParseRequest([]byte(flipped))
	if err != nil {
		t.Fatal(err)
	}
	hmacFail("edited hmac", Verify(fc, fr.HMAC, key))

	if err := Verify(canonical, r.HMAC, key[:16]); !errors.Is(err, ErrKeySize) {
		t.Errorf("short key: %v", err)
	}
	if _, err := MarshalRequest(goldenRequest(), nil); !errors.Is(err, ErrKeySize) {
		t.Errorf("MarshalRequest nil key: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Sign with a short key did not panic")
			}
		}()
		Sign(canonical, key[:31])
	}()
}

func TestMarshalRequest(t *testing.T) {
	key := testKey()
	for _, c := range []struct {
		name   string
		mutate func(*Request)
		want   string // substring of the file; "" to skip
		field  string // when refused
	}{
		{"text stdin", func(r *Request) { r.Stdin = []byte("a\x7f\u2028") }, "\"stdin\":\"a\x7f\u2028\"", ""},
		{"binary stdin", func(r *Request) { r.Stdin = []byte{0xff, 0} }, `"stdin_base64":"/wA="`, ""},
		{"NUL stdin", func(r *Request) { r.Stdin = []byte("a\x00") }, `"stdin_base64":"YQA="`, ""},
		{"confirm", func(r *Request) { r.RequiresConfirm = true }, `"requires_confirm":true`, ""},
		{"raw time kept", func(r *Request) { r.CreatedAtRaw = "2026-03-01T13:00:00+01:00" }, `"created_at":"2026-03-01T13:00:00+01:00"`, ""},
		{"only raw time", func(r *Request) { r.CreatedAt, r.CreatedAtRaw = time.Time{}, "2026-03-01T12:00:00.5Z" }, `"created_at":"2026-03-01T12:00:00.5Z"`, ""},
		{"local time", func(r *Request) { r.CreatedAt = time.Date(2026, 3, 1, 13, 0, 0, 1, time.FixedZone("x", 3600)) }, `"created_at":"2026-03-01T12:00:00.000000001Z"`, ""},
		{"times disagree", func(r *Request) { r.CreatedAtRaw = "2026-03-01T12:00:01Z" }, "", "created_at"},
		{"no time", func(r *Request) { r.CreatedAt = time.Time{} }, "", "created_at"},
		{"bad raw time", func(r *Request) { r.CreatedAt, r.CreatedAtRaw = time.Time{}, "yesterday" }, "", "created_at"},
		{"version 2", func(r *Request) { r.Version = 2 }, "", "version"},
		{"bad id", func(r *Request) { r.ID = "x" }, "", "id"},
		{"no argv", func(r *Request) { r.Argv = nil }, "", "argv"},
		{"argv NUL", func(r *Request) { r.Argv = []string{"ls", "a\x00"} }, "", "argv[1]"},
		{"argv bad UTF-8", func(r *Request) { r.Argv = []string{"ls", "\xff"} }, "", "argv[1]"},
		{"env name", func(r *Request) { r.Env = map[string]string{"A B": "x"} }, "", `env["A B"]`},
		{"fractional timeout", func(r *Request) { r.Timeout = 1500 * time.Millisecond }, "", "timeout"},
		{"negative timeout", func(r *Request) { r.Timeout = -time.Second }, "", "timeout"},
		{"long timeout", func(r *Request) { r.Timeout = 25 * time.Hour }, "", "timeout"},
		{"huge stdin", func(r *Request) { r.Stdin = make([]byte, MaxStdin+1) }, "", "stdin"},
		{"long note", func(r *Request) { r.Note = strings.Repeat("n", MaxNoteBytes+1) }, "", "note"},
	} {
		r := goldenRequest()
		c.mutate(r)
		out, err := MarshalRequest(r, key)
		if c.field != "" {
			if err == nil {
				t.Errorf("%s: accepted", c.name)
			} else if e := asError(t, err); e.Field != c.field || e.Code != CodeBadRequest {
				t.Errorf("%s: %v, want field %s", c.name, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s: %s lacks %s", c.name, out, c.want)
		}
		back, canonical, err := ParseRequest(out)
		if err != nil {
			t.Errorf("%s: reparse: %v", c.name, err)
			continue
		}
		if err := Verify(canonical, back.HMAC, key); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !bytes.Equal(back.Stdin, r.Stdin) || back.RequiresConfirm != r.RequiresConfirm {
			t.Errorf("%s: stdin %q confirm %v", c.name, back.Stdin, back.RequiresConfirm)
		}
	}
}

func TestTeardownRoundTrip(t *testing.T) {
	key := testKey()
	td := &Teardown{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", CreatedAt: time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC),
		Nonce: "r4Kx0bTfWv1kY8mZp2sN4g", Sandbox: "build-agent"}
	out, err := MarshalTeardown(td, key)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"created_at":"2026-03-01T12:00:05Z","hmac":"` + Sign([]byte(`{"created_at":"2026-03-01T12:00:05Z","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"r4Kx0bTfWv1kY8mZp2sN4g","sandbox":"build-agent","version":1}`), key) +
		`","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"r4Kx0bTfWv1kY8mZp2sN4g","sandbox":"build-agent","version":1}` + "\n"
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	back, canonical, err := ParseTeardown(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(canonical, back.HMAC, key); err != nil {
		t.Fatal(err)
	}
	td.Version, td.CreatedAtRaw, td.HMAC = 1, "2026-03-01T12:00:05Z", back.HMAC
	if !reflect.DeepEqual(back, td) {
		t.Errorf("got %+v\nwant %+v", back, td)
	}
	if _, err := MarshalTeardown(&Teardown{ID: "x"}, key); err == nil {
		t.Error("invalid teardown marshalled")
	}
}

// The codes are coily's refusal codes.
func TestCodesAreRefusalCodes(t *testing.T) {
	if CodeBadRequest != string(refusal.BadRequest) || CodeHMACFail != string(refusal.HMACFail) {
		t.Errorf("codes drifted from package refusal")
	}
}
