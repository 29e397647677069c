package audit

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

// fuzzBase returns the bytes of a valid 4-line log and seeds f with it and
// tampered variants.
func fuzzBase(f *testing.F) []byte {
	_, path := validLog(f, 4)
	return readFile(f, path)
}

// FuzzVerify appends arbitrary bytes to a valid log. Verify must not panic,
// must never blame the valid lines, and must accept the valid log itself.
// The fuzz input is also fed to parseLine directly.
func FuzzVerify(f *testing.F) {
	base := fuzzBase(f)
	lines := splitLines(base)
	f.Add([]byte{})
	f.Add([]byte("\n"))
	f.Add([]byte("garbage\n"))
	f.Add([]byte(`{"id":"A000000000005","seq":5}` + "\n"))
	for _, l := range lines {
		f.Add(append(bytes.Clone(l), '\n')) // replayed line: chain broken
		f.Add(bytes.Clone(l))               // torn
		mod := bytes.Clone(l)
		mod[len(mod)/2] ^= 1
		f.Add(append(mod, '\n'))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if rec, h, err := parseLine(data); err == nil {
			body := data[:len(data)-suffixLen]
			if rec.Hash != hashHex(body) || h != hashHex(data) || rec.ID != formatID(rec.Seq) {
				t.Fatalf("parseLine accepted an inconsistent line: %q", data)
			}
		}

		dir := t.TempDir()
		path := filepath.Join(dir, "2026-10.jsonl")
		writeFile(t, path, append(bytes.Clone(base), data...))
		rep, err := Verify(dir)
		if len(data) == 0 {
			if err != nil || rep.Lines != len(lines) {
				t.Fatalf("valid log: Verify = %+v, %v", rep, err)
			}
			return
		}
		if err == nil {
			if rep.Lines <= len(lines) {
				t.Fatalf("Verify accepted extra bytes but counted %d lines", rep.Lines)
			}
			if _, err := Tail(dir, rep.Lines); err != nil {
				t.Fatalf("Verify passed but Tail failed: %v", err)
			}
			return
		}
		var be *BrokenError
		if !errors.As(err, &be) {
			t.Fatalf("Verify = %v, want *BrokenError", err)
		}
		if be.File != path || be.Line <= len(lines) || rep.Lines != be.Line-1 {
			t.Fatalf("Verify blamed %s:%d after %d good lines; valid lines are 1..%d", be.File, be.Line, rep.Lines, len(lines))
		}
	})
}

// FuzzTamperByte changes one byte of a valid log to any other value and
// checks that Verify fails and names the line holding that byte.
func FuzzTamperByte(f *testing.F) {
	base := fuzzBase(f)
	for _, pos := range []uint{0, 10, 40, 100, 300, uint(len(base) / 2), uint(len(base) - 1)} {
		f.Add(pos, byte('x'))
		f.Add(pos, byte('\n'))
		f.Add(pos, byte('0'))
	}
	f.Fuzz(func(t *testing.T, pos uint, b byte) {
		i := int(pos % uint(len(base)))
		if base[i] == b {
			return
		}
		data := bytes.Clone(base)
		data[i] = b
		dir := t.TempDir()
		path := filepath.Join(dir, "2026-10.jsonl")
		writeFile(t, path, data)
		want := 1 + bytes.Count(base[:i], []byte("\n"))
		_, err := Verify(dir)
		var be *BrokenError
		if !errors.As(err, &be) || be.File != path || be.Line != want {
			t.Fatalf("byte %d (line %d) set to %q: Verify = %v", i, want, b, err)
		}
	})
}
