package witness

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

var hash64 = base64.StdEncoding.EncodeToString(make([]byte, 32))

// addCases are hostile add-checkpoint bodies (and two good ones): the
// parser's table and the fuzz target's seeds.
var addCases = []struct {
	name string
	body string
	ok   bool
}{
	{"no proof", "old 0\n\ncoily/a\n1\nX\n\n— k sig\n", true},
	{"one proof line", "old 3\n" + hash64 + "\n\ncp\n", true},
	{"empty", "", false},
	{"no empty line", "old 0\ncp\n", false},
	{"no old line", "\n\ncp\n", false},
	{"old spelled otherwise", "Old 0\n\ncp\n", false},
	{"negative old", "old -1\n\ncp\n", false},
	{"signed old", "old +1\n\ncp\n", false},
	{"leading zero", "old 01\n\ncp\n", false},
	{"huge old", "old 99999999999999999999\n\ncp\n", false},
	{"old past int64", "old 9223372036854775808\n\ncp\n", false},
	{"bad base64", "old 3\n!!!!\n\ncp\n", false},
	{"short hash", "old 3\n" + base64.StdEncoding.EncodeToString(make([]byte, 31)) + "\n\ncp\n", false},
	{"long hash", "old 3\n" + base64.StdEncoding.EncodeToString(make([]byte, 33)) + "\n\ncp\n", false},
	{"unpadded hash", "old 3\n" + strings.TrimRight(hash64, "=") + "\n\ncp\n", false},
	{"too many proof lines", "old 3\n" + strings.Repeat(hash64+"\n", MaxProofLines+1) + "\ncp\n", false},
	{"no checkpoint", "old 0\n\n", false},
	{"over the cap", "old 0\n\n" + strings.Repeat("x", MaxBody), false},
	{"CR line ends", "old 0\r\n\r\ncp\n", false},
}

func TestParseAddRequest(t *testing.T) {
	for _, tc := range addCases {
		r, err := ParseAddRequest([]byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v does not wrap ErrMalformed", tc.name, err)
		}
		if err == nil && !bytes.Equal(r.Format(), []byte(tc.body)) {
			t.Errorf("%s: formats back as %q", tc.name, r.Format())
		}
	}
	full := AddRequest{Old: 1 << 62, Proof: make(tlog.TreeProof, MaxProofLines), Checkpoint: bytes.Repeat([]byte("c"), 16<<10)}
	if _, err := ParseAddRequest(full.Format()); err != nil {
		t.Fatalf("the largest request: %v", err)
	}
}

var sizeCases = []struct {
	body string
	n    int64
	ok   bool
}{
	{"0\n", 0, true},
	{"50\n", 50, true},
	{"9223372036854775807\n", 1<<63 - 1, true},
	{"50", 0, false},
	{"050\n", 0, false},
	{"-1\n", 0, false},
	{"+1\n", 0, false},
	{"1\n2\n", 0, false},
	{" 1\n", 0, false},
	{"9223372036854775808\n", 0, false},
	{"99999999999999999999999999\n", 0, false},
	{"\n", 0, false},
	{"", 0, false},
	{"0x10\n", 0, false},
}

func TestParseSize(t *testing.T) {
	for _, tc := range sizeCases {
		n, err := ParseSize([]byte(tc.body))
		if (err == nil) != tc.ok || n != tc.n {
			t.Errorf("%q: %d, %v; want %d ok=%v", tc.body, n, err, tc.n, tc.ok)
		}
	}
}

func TestCheckCosignature(t *testing.T) {
	l := newMemLog(t, "coily/a")
	s, wkey := newWitness(t, t.TempDir(), l)
	_, otherKey := newWitness(t, t.TempDir(), l)
	msg := l.sign(t, 5)
	sig, err := s.Add(AddRequest{Checkpoint: msg}.Format())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckCosignature(msg, sig, wkey); err != nil {
		t.Fatalf("a good cosignature: %v", err)
	}
	other := l.sign(t, 6)
	cases := map[string]struct {
		cp, sig []byte
		key     string
	}{
		"another witness's key":     {msg, sig, otherKey},
		"another checkpoint":        {other, sig, wkey},
		"empty":                     {msg, nil, wkey},
		"garbage":                   {msg, []byte("hello\n"), wkey},
		"bad base64":                {msg, []byte("— witness.test !!!!\n"), wkey},
		"the log's own signature":   {msg, msg[bytes.LastIndex(msg, []byte("\n\n"))+2:], wkey},
		"over the cap":              {msg, append(bytes.Repeat([]byte("— witness.test AAAA\n"), MaxCosignature/20+1), sig...), wkey},
		"a plain Ed25519 signature": {msg, plainSig(t, msg), wkey},
		"not a note":                {[]byte("coily/a"), sig, wkey},
	}
	for name, tc := range cases {
		if _, err := CheckCosignature(tc.cp, tc.sig, tc.key); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// plainSig is a signature of msg's text by a plain Ed25519 note key
// (not cosignature/v1) named as the witness.
func plainSig(t *testing.T, msg []byte) []byte {
	t.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, "witness.test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := splitNote(msg)
	signed, err := note.Sign(&note.Note{Text: string(text)}, s)
	if err != nil {
		t.Fatal(err)
	}
	_, sig, _ := splitNote(signed)
	return sig
}
