package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A state file bbolt cannot use is never opened as if it were empty (which
// would read as "unlocked"), and never panics: it is ErrDamaged naming the
// file and the way out. A missing or empty file opens, marked Created.
func TestOpenDamaged(t *testing.T) {
	good := filepath.Join(t.TempDir(), "coily.db")
	db, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	if !db.Created() {
		t.Error("a new file is not marked created")
	}
	if err := db.SetLockout(Stop{Active: true, By: "t", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := db.PutRequest(Request{ID: strings.Repeat("x", 10) + string(rune('a'+i%26)) + time.Now().String(), Argv: []string{strings.Repeat("y", 2000)}}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"zeroed":             make([]byte, len(data)),
		"truncated to half":  data[:len(data)/2],
		"truncated to pages": data[:2*os.Getpagesize()],
		"garbage":            []byte(strings.Repeat("not a bbolt file", 1024)),
		"one byte":           {1},
		"meta zeroed":        append(make([]byte, 2*os.Getpagesize()), data[2*os.Getpagesize():]...),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "coily.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := Open(path)
			if err == nil {
				st, serr := db.Stops()
				db.Close()
				t.Fatalf("a %s file opened (stops %+v, %v)", name, st, serr)
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "coily state rebuild") {
				t.Fatalf("error %v: want ErrDamaged naming the file and the way out", err)
			}
			if after, _ := os.ReadFile(path); string(after) != string(content) {
				t.Fatal("the damaged file was changed")
			}
		})
	}
	empty := filepath.Join(t.TempDir(), "coily.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = Open(empty)
	if err != nil || !db.Created() {
		t.Fatalf("an empty file: %v, created %v", err, db != nil && db.Created())
	}
	db.Close()
	db, err = Open(good)
	if err != nil || db.Created() {
		t.Fatalf("reopening: %v", err)
	}
	st, _ := db.Stops()
	db.Close()
	if !st.Lockout.Active {
		t.Fatal("the lockout was lost")
	}
}
