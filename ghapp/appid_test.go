package ghapp

import (
	"strconv"
	"testing"
)

func TestCheckAppID(t *testing.T) {
	for _, ok := range []string{"1", "123456", "9007199254740991", "Iv1.abc", "Iv23liABC"} {
		if err := CheckAppID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "+1", "01", "9007199254740992", "1e3", " 1", "Iv", "Iv1/x", "iv1.abc", "1\n"} {
		if CheckAppID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzCheckAppID(f *testing.F) {
	for _, s := range []string{"1", "Iv1.abc", "0", "01", "9007199254740992", "Iv1/x", "1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckAppID(s) != nil {
			return
		}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && (id < 1 || id > MaxID) {
			t.Fatalf("%q accepted", s)
		} else if err != nil && !clientIDPattern.MatchString(s) {
			t.Fatalf("%q accepted", s)
		}
	})
}
