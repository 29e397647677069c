package audit

import (
	"errors"
	"strings"
	"testing"
)

// Prove, then CheckProof: every record of a rotated log, at a checkpoint
// older than the log; a proof whose line, index, hashes or checkpoint was
// changed does not check.
func TestProveAndCheck(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now, MaxFileSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 21)
	msg, cp := signedHead(t, l)
	appendN(t, l, 4)
	l.Close()
	for seq := uint64(1); seq <= uint64(cp.N); seq++ {
		p, err := Prove(dir, seq, msg)
		if err != nil {
			t.Fatalf("Prove %d: %v", seq, err)
		}
		rec, c, err := CheckProof(p.Format(), testVKey)
		if err != nil || rec.Seq != seq || c != cp {
			t.Fatalf("CheckProof of record %d: %d, %v, %v", seq, rec.Seq, c, err)
		}
	}
	if _, err := Prove(dir, uint64(cp.N)+1, msg); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Prove past the checkpoint = %v", err)
	}
	p, err := Prove(dir, 7, msg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Prove(dir, 8, msg)
	if err != nil {
		t.Fatal(err)
	}
	_, otherV, _ := GenerateSigner("coily/test")
	for name, q := range map[string]func(p *Proof){
		"another line":  func(p *Proof) { p.Line = other.Line },
		"another index": func(p *Proof) { p.Index = 7 },
		"a hash":        func(p *Proof) { p.Hashes[0][3] ^= 1 },
		"a checkpoint":  func(p *Proof) { p.Checkpoint = []byte(strings.Replace(string(p.Checkpoint), "\n21\n", "\n22\n", 1)) },
	} {
		bad := p
		bad.Hashes = append(bad.Hashes[:0:0], p.Hashes...)
		q(&bad)
		if _, _, err := CheckProof(bad.Format(), testVKey); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("a proof with %s: %v", name, err)
		}
	}
	if _, _, err := CheckProof(p.Format(), otherV); !errors.Is(err, ErrBadCheckpoint) {
		t.Errorf("a proof checked with another key: %v", err)
	}
}

// hostileCheckpoints are signed notes and texts a witness or an attacker
// could hand to OpenCheckpoint (seeds for the fuzz targets).
func hostileCheckpoints(t testing.TB) map[string][]byte {
	good, err := SignCheckpoint(testSKey, Tree{N: 5})
	if err != nil {
		t.Fatal(err)
	}
	otherS, _, _ := GenerateSigner("coily/test")
	byOther, _ := SignCheckpoint(otherS, Tree{N: 5})
	wrongS, _, _ := GenerateSigner("coily/elsewhere")
	wrongOrigin, _ := SignCheckpoint(wrongS, Tree{N: 5})
	body, sig, _ := strings.Cut(string(good), "\n\n")
	return map[string][]byte{
		"huge size":      []byte(strings.Replace(body, "\n5\n", "\n99999999999999999999999\n", 1) + "\n\n" + sig),
		"negative size":  []byte(strings.Replace(body, "\n5\n", "\n-5\n", 1) + "\n\n" + sig),
		"bad base64":     []byte(body[:len(body)-3] + "!!\n\n" + sig),
		"extra line":     []byte(body + "\nextension\n\n" + sig),
		"by another key": byOther,
		"wrong origin":   wrongOrigin,
		"no signature":   []byte(body + "\n\n"),
		"empty":          nil,
		"text only":      []byte(body + "\n"),
		"control chars":  []byte("coily/test\n5\n\x00\n\n" + sig),
		"leading zero":   []byte(strings.Replace(body, "\n5\n", "\n05\n", 1) + "\n\n" + sig),
	}
}

func TestOpenCheckpointRefusesHostile(t *testing.T) {
	good, _ := SignCheckpoint(testSKey, Tree{N: 5})
	if c, err := OpenCheckpoint(good, testVKey); err != nil || c.N != 5 || c.Origin != "coily/test" {
		t.Fatalf("a good checkpoint: %+v, %v", c, err)
	}
	for name, msg := range hostileCheckpoints(t) {
		if c, err := OpenCheckpoint(msg, testVKey); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%s: %+v, %v; want ErrBadCheckpoint", name, c, err)
		}
	}
	for _, text := range []string{"", "coily/test\n5\n", "coily/test\n5\nAAAA\n", "a b\n5\n" + strings.Repeat("A", 43) + "=\n",
		"coily/test\n5\n" + strings.Repeat("A", 43) + "=\nmore\n", "coily/test\n+5\n" + strings.Repeat("A", 43) + "=\n"} {
		if _, err := ParseCheckpoint([]byte(text)); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("ParseCheckpoint(%q) = %v", text, err)
		}
	}
}

func TestParseProofRefusesHostile(t *testing.T) {
	good, _ := SignCheckpoint(testSKey, Tree{N: 5})
	h := "hash " + strings.Repeat("A", 43) + "=\n"
	for name, text := range map[string]string{
		"no header":        "index 1\nline eA==\n\n" + string(good),
		"no checkpoint":    proofHeader + "\nindex 1\nline eA==\n",
		"negative index":   proofHeader + "\nindex -1\nline eA==\n\n" + string(good),
		"huge index":       proofHeader + "\nindex 99999999999999999999\nline eA==\n\n" + string(good),
		"bad line base64":  proofHeader + "\nindex 1\nline e!==\n\n" + string(good),
		"empty line":       proofHeader + "\nindex 1\nline \n\n" + string(good),
		"short hash":       proofHeader + "\nindex 1\nline eA==\nhash AAAA\n\n" + string(good),
		"too many hashes":  proofHeader + "\nindex 1\nline eA==\n" + strings.Repeat(h, 65) + "\n" + string(good),
		"unknown line":     proofHeader + "\nindex 1\nline eA==\nnote hi\n\n" + string(good),
		"index past tree":  proofHeader + "\nindex 5\nline eA==\n\n" + string(good),
		"line not record":  proofHeader + "\nindex 0\nline eA==\n\n" + string(good),
		"leading zero idx": proofHeader + "\nindex 01\nline eA==\n\n" + string(good),
	} {
		if _, _, err := CheckProof([]byte(text), testVKey); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzOpenCheckpoint(f *testing.F) {
	good, _ := SignCheckpoint(testSKey, Tree{N: 5})
	f.Add(good)
	for _, msg := range hostileCheckpoints(f) {
		f.Add(msg)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, err := OpenCheckpoint(msg, testVKey)
		if err != nil {
			return
		}
		// Whatever opens is a checkpoint this key signed, and reads back.
		again, err := SignCheckpoint(testSKey, c.Tree)
		if err != nil || c.Origin != "coily/test" || c.N < 0 {
			t.Fatalf("opened %+v from %q", c, msg)
		}
		if c2, err := OpenCheckpoint(again, testVKey); err != nil || c2 != c {
			t.Fatalf("re-signed %+v opens as %+v, %v", c, c2, err)
		}
	})
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add([]byte("coily/test\n5\n" + strings.Repeat("A", 43) + "=\n"))
	for _, msg := range hostileCheckpoints(f) {
		body, _, _ := strings.Cut(string(msg), "\n\n")
		f.Add([]byte(body + "\n"))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		c, err := ParseCheckpoint(text)
		if err != nil {
			return
		}
		if string(c.Format()) != string(text) {
			t.Fatalf("ParseCheckpoint(%q) = %+v, which formats as %q", text, c, c.Format())
		}
	})
}

func FuzzCheckProof(f *testing.F) {
	dir := f.TempDir()
	l, err := Open(Config{Dir: dir, Now: newClock(oct).Now})
	if err != nil {
		f.Fatal(err)
	}
	appendN(f, l, 5)
	msg, _ := signedHead(f, l)
	l.Close()
	for seq := uint64(1); seq <= 5; seq++ {
		p, err := Prove(dir, seq, msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p.Format())
	}
	f.Add([]byte(proofHeader + "\nindex 99999999999999999999\nline eA==\n\n" + string(msg)))
	f.Fuzz(func(t *testing.T, text []byte) {
		rec, c, err := CheckProof(text, testVKey)
		if err != nil {
			return
		}
		if rec.Seq == 0 || int64(rec.Seq) > c.N || c.N > 5 {
			t.Fatalf("a forged proof checked: record %d in %+v", rec.Seq, c)
		}
	})
}
