package audit_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"coily.dev/coily/audit"
)

// checkProofIndependently checks a proof file as someone without coily
// would: its own reading of the printed text, and only the library's
// verifiers (note.Open for the signature, tlog.CheckRecord for the
// inclusion). It shares no code with the writer.
func checkProofIndependently(t *testing.T, text []byte, vkey string) (line []byte, index, size int64) {
	t.Helper()
	head, signed, ok := bytes.Cut(text, []byte("\n\n"))
	if !ok {
		t.Fatalf("no blank line in %q", text)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		t.Fatalf("note.Open: %v", err)
	}
	cp := strings.Split(n.Text, "\n") // origin, size, root, ""
	if len(cp) != 4 || cp[0] != v.Name() {
		t.Fatalf("checkpoint text %q", n.Text)
	}
	size, err = strconv.ParseInt(cp[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	rootBytes, err := base64.StdEncoding.DecodeString(cp[2])
	if err != nil || len(rootBytes) != tlog.HashSize {
		t.Fatalf("root %q: %v", cp[2], err)
	}
	var proof tlog.RecordProof
	for _, l := range strings.Split(string(head), "\n")[1:] {
		key, val, _ := strings.Cut(l, " ")
		switch key {
		case "index":
			index, err = strconv.ParseInt(val, 10, 64)
		case "line":
			line, err = base64.StdEncoding.DecodeString(val)
		case "hash":
			var h []byte
			h, err = base64.StdEncoding.DecodeString(val)
			proof = append(proof, tlog.Hash(h))
		}
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
	}
	if err := tlog.CheckRecord(proof, size, tlog.Hash(rootBytes), index, tlog.RecordHash(line)); err != nil {
		t.Fatalf("tlog.CheckRecord of record %d in %d: %v", index+1, size, err)
	}
	return line, index, size
}

// Every record's printed proof checks with the library's verifier alone,
// and the line it proves is the record's line as the log file holds it.
func TestProofsCheckIndependently(t *testing.T) {
	dir := t.TempDir()
	skey, vkey, err := audit.GenerateSigner("coily/host-a")
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(audit.Config{Dir: dir, MaxFileSize: 3 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := l.Append(context.Background(), audit.Record{Event: "exec.decision", Principal: "agent", Reason: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := l.TreeHead()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := audit.SignCheckpoint(skey, tree)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for seq := uint64(1); seq <= 40; seq++ {
		p, err := audit.Prove(dir, seq, signed)
		if err != nil {
			t.Fatal(err)
		}
		line, index, size := checkProofIndependently(t, p.Format(), vkey)
		rec, _, err := audit.ParseLine(line)
		if err != nil || rec.Seq != seq || index != int64(seq)-1 || size != 40 {
			t.Fatalf("record %d: proved line of record %d at index %d in %d (%v)", seq, rec.Seq, index, size, err)
		}
	}
}
