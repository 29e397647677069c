package gitproxy

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// index builds a version 2 pack index of ids at offsets (20-byte ids).
func index(ids [][20]byte, offs []uint64) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	for i := range 256 {
		n := 0
		for _, id := range ids {
			if int(id[0]) <= i {
				n++
			}
		}
		binary.Write(&b, binary.BigEndian, uint32(n))
	}
	for _, id := range ids {
		b.Write(id[:])
	}
	b.Write(make([]byte, 4*len(ids))) // CRCs
	var large []uint64
	for _, o := range offs {
		if o >= 1<<31 {
			binary.Write(&b, binary.BigEndian, uint32(0x80000000|len(large)))
			large = append(large, o)
			continue
		}
		binary.Write(&b, binary.BigEndian, uint32(o))
	}
	for _, o := range large {
		binary.Write(&b, binary.BigEndian, o)
	}
	b.Write(make([]byte, 40)) // the pack's and the index's checksums
	return b.Bytes()
}

// parseIndex reads ids and offsets, large ones too, and refuses an index
// that is cut short, of another version, or points past its large
// offsets.
func TestParseIndex(t *testing.T) {
	ids := [][20]byte{{1}, {2}, {3}}
	good := index(ids, []uint64{12, 5 << 30, 40})
	oids, offs, err := parseIndex(good, 20)
	if err != nil || len(oids) != 3 || offs[1] != 5<<30 || offs[2] != 40 || oids[0] != "01"+string(bytes.Repeat([]byte("0"), 38)) {
		t.Fatalf("parseIndex: %v %v %v", oids, offs, err)
	}
	badLarge := bytes.Clone(good)
	binary.BigEndian.PutUint32(badLarge[8+1024+3*20+3*4+4:], 0x80000007)
	for name, d := range map[string][]byte{
		"empty":                     nil,
		"cut short":                 good[:len(good)-50],
		"version 1":                 append([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 1}, good[8:]...),
		"large offset out of range": badLarge,
	} {
		if _, _, err := parseIndex(d, 20); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzParseIndex: parseIndex never panics, and what it returns has one
// offset per id.
func FuzzParseIndex(f *testing.F) {
	f.Add(index([][20]byte{{1}, {2}}, []uint64{12, 5 << 30}))
	f.Add(index(nil, nil))
	f.Fuzz(func(t *testing.T, d []byte) {
		oids, offs, err := parseIndex(d, 20)
		if err == nil && len(oids) != len(offs) {
			t.Fatalf("%d ids, %d offsets", len(oids), len(offs))
		}
	})
}
