package sandbox

import (
	"strings"
	"testing"
)

// userCases are --sandbox-user values and what ParseUser makes of them
// (uid -1: refused). Names and ids that resolve use entries every Linux
// user database has (root, nobody).
var userCases = []struct {
	spec     string
	uid, gid int
}{
	{"nobody", 65534, 65534},
	{"65534", 65534, 65534},
	{"4294967294", 4294967294, 4294967294}, // no entry: the group of the same number
	{"123456", 123456, 123456},
	{"root", -1, 0},
	{"0", -1, 0},
	{"00", -1, 0},
	{"065534", -1, 0},
	{"", -1, 0},
	{"-1", -1, 0},
	{"+1", -1, 0},
	{" 65534", -1, 0},
	{"65534 ", -1, 0},
	{"0x10", -1, 0},
	{"1e3", -1, 0},
	{"4294967295", -1, 0},
	{"4294967296", -1, 0},
	{"99999999999999999999", -1, 0},
	{"nobody\n", -1, 0},
	{"no:body", -1, 0},
	{"nobody:x:0:0", -1, 0},
	{"../etc/passwd", -1, 0},
	{"-rf", -1, 0},
	{"nøbody", -1, 0},
	{"no-such-user-coily", -1, 0},
	{strings.Repeat("a", 65), -1, 0},
	{"nobody\x00", -1, 0},
}

func TestParseUser(t *testing.T) {
	for _, c := range userCases {
		u, err := ParseUser(c.spec)
		switch {
		case c.uid < 0 && err == nil:
			t.Errorf("%q: accepted as %v", c.spec, u)
		case c.uid >= 0 && (err != nil || u.UID != c.uid || u.GID != c.gid):
			t.Errorf("%q: %v %v, want %d:%d", c.spec, u, err, c.uid, c.gid)
		}
	}
}

// The checks every User passes, however made: never uid 0 or group 0.
func TestUserCheck(t *testing.T) {
	for _, u := range []User{{UID: 0, GID: 1}, {UID: 1, GID: 0}, {UID: -1, GID: 1}, {UID: 1, GID: 1 << 32}, {}} {
		if u.Check() == nil {
			t.Errorf("%+v accepted", u)
		}
	}
	if err := (User{UID: 1, GID: 1}).Check(); err != nil {
		t.Error(err)
	}
	if d := DefaultUser(); d.Check() != nil || d.IsZero() {
		t.Errorf("default user %+v: %v", d, d.Check())
	}
}

// FuzzParseUser: whatever the value, ParseUser never yields root's uid or
// group, and what it accepts is a plain name or a canonical number.
func FuzzParseUser(f *testing.F) {
	for _, c := range userCases {
		f.Add(c.spec)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		u, err := ParseUser(spec)
		if err != nil {
			return
		}
		if u.UID <= 0 || u.GID <= 0 || u.Check() != nil {
			t.Fatalf("%q accepted as %+v", spec, u)
		}
		if allDigits(spec) && spec != strings.TrimLeft(spec, "0") {
			t.Fatalf("%q: a non-canonical number accepted", spec)
		}
	})
}
