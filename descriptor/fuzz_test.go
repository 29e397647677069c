package descriptor

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"coily.dev/coily/internal/hostileyaml"
)

// fuzzSeeds are the table's inputs (the huge ones left out: the fuzzer
// mutates small inputs better) and the golden example.
func fuzzSeeds(f *testing.F) {
	for _, c := range parseCases() {
		if len(c.in) <= 8<<10 {
			f.Add([]byte(c.in))
		}
	}
	f.Add([]byte(billionLaughs))
	for _, c := range hostileyaml.Cases(yamlDoc(), 4<<10, MaxDepth, MaxNodes) {
		f.Add(c.Data)
	}
	out, err := MarshalRequest(goldenRequest(), testKey())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(out)
}

// checkRefusal checks a refusal is a well-formed *Error.
func checkRefusal(t *testing.T, err error) {
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != CodeBadRequest && e.Code != CodeHMACFail {
		t.Fatalf("code %q", e.Code)
	}
	if len(e.Error()) > 300 {
		t.Fatalf("error message of %d bytes", len(e.Error()))
	}
}

func FuzzParseRequest(f *testing.F) {
	fuzzSeeds(f)
	key := testKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		r, canonical, err := ParseRequest(data)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("parse took %v", d)
		}
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if got, err := CanonicalizeJSON(canonical); err != nil || !bytes.Equal(got, canonical) {
			t.Fatalf("canonical bytes not a fixed point: %v\n%q\n%q", err, canonical, got)
		}
		var obj map[string]any
		if err := json.Unmarshal(canonical, &obj); err != nil {
			t.Fatalf("canonical bytes are not a JSON object: %v", err)
		}
		if _, ok := obj["hmac"]; ok {
			t.Fatal("canonical bytes include hmac")
		}
		out, err := MarshalRequest(r, key)
		if err != nil {
			t.Fatalf("MarshalRequest of an accepted request: %v", err)
		}
		r2, canonical2, err := ParseRequest(out)
		if err != nil {
			t.Fatalf("reparse: %v\n%s", err, out)
		}
		if err := Verify(canonical2, r2.HMAC, key); err != nil {
			t.Fatalf("verify: %v", err)
		}
		a, b := *r, *r2
		a.HMAC, b.HMAC = "", ""
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", a, b)
		}
		if again, err := MarshalRequest(r2, key); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("MarshalRequest not stable: %v", err)
		}
	})
}

func FuzzParseTeardown(f *testing.F) {
	fuzzSeeds(f)
	key := testKey()
	td, err := MarshalTeardown(&Teardown{ID: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", CreatedAt: time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC),
		Nonce: "r4Kx0bTfWv1kY8mZp2sN4g", Sandbox: "build-agent"}, key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(td)
	f.Add([]byte("version: 1\nid: 0f8fad5b-d9cb-469f-a165-70867728950e\ncreated_at: 2026-01-02T03:04:05+01:00\nnonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19\nsandbox: agent-1\nhmac: '" + string(bytes.Repeat([]byte("0"), 64)) + "'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		td, canonical, err := ParseTeardown(data)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("parse took %v", d)
		}
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if got, err := CanonicalizeJSON(canonical); err != nil || !bytes.Equal(got, canonical) {
			t.Fatalf("canonical bytes not a fixed point: %v", err)
		}
		out, err := MarshalTeardown(td, key)
		if err != nil {
			t.Fatalf("MarshalTeardown of an accepted teardown: %v", err)
		}
		td2, canonical2, err := ParseTeardown(out)
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if err := Verify(canonical2, td2.HMAC, key); err != nil {
			t.Fatal(err)
		}
		a, b := *td, *td2
		a.HMAC, b.HMAC = "", ""
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the teardown:\n%+v\n%+v", a, b)
		}
	})
}

func FuzzCanonicalizeJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, `[56, {"d": true, "10": null, "1": [ ]}]`,
		`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]}`,
		`"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`, `{"\ud83d\ude00":1,"\u0080":2,"\ufb33":3,"\r":4}`,
		`-0`, `1e400`, `5e-324`, `[1e21, 1e-7, 123456789012345678901234567890]`, `{"a":1,"a":2}`, `"\ud800"`,
		"\"\u2028\u2029\x7f\"", ` [ ] `, `{}`, `0.1`, `-1.5e-10`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := CanonicalizeJSON(data)
		if err != nil {
			return
		}
		again, err := CanonicalizeJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", data, out, again, err)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("output is not valid JSON: %q", out)
		}
		var in, got any
		if err := decodeNumbers(data, &in); err != nil {
			t.Fatalf("encoding/json refuses accepted input %q: %v", data, err)
		}
		if err := decodeNumbers(out, &got); err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(in, got) {
			t.Fatalf("output differs from input:\n%q\n%q", data, out)
		}
	})
}

func decodeNumbers(data []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// jsonEqual compares decoded JSON, numbers by their value as doubles.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, err1 := strconv.ParseFloat(string(a), 64)
		y, err2 := strconv.ParseFloat(string(bn), 64)
		return err1 == nil && err2 == nil && x == y
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bs[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if w, ok := bm[k]; !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// FuzzParseResponse: the sandbox client reads responses from a folder the
// sandbox can also write. An accepted response re-marshals to a response
// that parses to the same value, and its output decodes.
func FuzzParseResponse(f *testing.F) {
	const id = `"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"`
	for _, s := range []string{
		`{"audit_id":"a-17","duration_ms":1234,"exit_code":1,` + id + `,"outcome":"exit","rule":"git-read","signal":0,"stderr_base64":"/3g=","stderr_truncated":true,"stdout":"ok\n","stdout_truncated":false,"version":1}`,
		`{"code":"policy-deny","duration_ms":0,` + id + `,"message":"no","outcome":"refused","version":1}`,
		`{"version":1,` + id + `,"outcome":"exit","exit_code":0,"exit_code":1}`,
		"version: 1\nid: 5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84\noutcome: exit\nexit_code: 0\n",
		`{"version":1,` + id + `,"outcome":"exit","exit_code":0,"stdout":"","stdout_base64":"AA=="}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseResponse(data)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if _, err := r.Stdout(); err != nil {
			t.Fatalf("accepted response with undecodable stdout: %v", err)
		}
		if _, err := r.Stderr(); err != nil {
			t.Fatalf("accepted response with undecodable stderr: %v", err)
		}
		out, err := MarshalResponse(r)
		if err != nil {
			t.Fatalf("accepted response does not marshal: %v", err)
		}
		back, err := ParseResponse(out)
		if err != nil || !reflect.DeepEqual(normalized(back), normalized(r)) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, r, back)
		}
	})
}

// normalized drops what a response's text does not carry identically
// through a round trip (the version number read).
func normalized(r *Response) Response {
	c := *r
	c.Version = 0
	return c
}
