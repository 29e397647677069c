package ghapp

import "testing"

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
