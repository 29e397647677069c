package descriptor

import (
	"strings"
	"testing"
)

var nameCases = []struct {
	name string
	id   string // "" when refused
}{
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json", "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.yaml", "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"},
	{"5B0C5A4E-3F8D-4C2A-9E71-0D6F3B2A1C84.json", ""}, // upper case
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.yml", ""},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json.tmp", ""},
	{".5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json", ""},
	{"../5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json", ""},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json/", ""},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c8.json", ""},   // short
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c845.json", ""}, // long
	{"{5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84}.json", ""},
	{"5b0c5a4e3f8d4c2a9e710d6f3b2a1c84.json", ""},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84\x00.json", ""},
	{"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84.json\n", ""},
	{strings.Repeat("a", 300) + ".json", ""},
	{"", ""},
	{".json", ""},
	{"x.json", ""},
}

func TestIDFromName(t *testing.T) {
	for _, tc := range nameCases {
		id, ok := IDFromName(tc.name)
		if ok != (tc.id != "") || id != tc.id {
			t.Errorf("IDFromName(%q) = %q, %v; want %q", tc.name, id, ok, tc.id)
		}
	}
}

// FuzzIDFromName: an accepted name is exactly FileName of its id or its
// .yaml twin, and holds no path separator or dot segment.
func FuzzIDFromName(f *testing.F) {
	for _, tc := range nameCases {
		f.Add(tc.name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, ok := IDFromName(name)
		if !ok {
			return
		}
		if name != FileName(id) && name != id+".yaml" {
			t.Fatalf("%q accepted as id %q", name, id)
		}
		if strings.ContainsAny(name, "/\x00\\") || strings.HasPrefix(name, ".") {
			t.Fatalf("unsafe name %q accepted", name)
		}
	})
}

func TestNewIDFitsTheGrammar(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if got, ok := IDFromName(FileName(id)); !ok || got != id || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("NewID() = %q is not a version 4 UUID in the file-name grammar", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}
