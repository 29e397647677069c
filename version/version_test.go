package version

import (
	"runtime/debug"
	"testing"
)

func TestLine(t *testing.T) {
	for _, c := range []struct{ version, commit, want string }{
		{"dev", "", "dev"},
		{"dev", "0123456789abcdef0123456789abcdef01234567-dirty", "dev (commit 0123456789abcdef0123456789abcdef01234567-dirty)"},
		{"1.2.0", "0123456789abcdef0123456789abcdef01234567", "1.2.0 (commit 0123456789abcdef0123456789abcdef01234567)"},
	} {
		if got := line(c.version, c.commit); got != c.want {
			t.Errorf("line(%q, %q) = %q, want %q", c.version, c.commit, got, c.want)
		}
	}
}

func TestFromSettings(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, ""},
		{[]debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}, rev},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: rev}}, rev + "-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		if got := fromSettings(c.settings); got != c.want {
			t.Errorf("fromSettings(%v) = %q, want %q", c.settings, got, c.want)
		}
	}
}

// TestStampWins: what release.sh stamps is what a binary says.
func TestStampWins(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "", ""
	if Version() != "dev" {
		t.Errorf("unstamped Version() = %q, want dev", Version())
	}
	version, commit = "1.2.3-rc1", "0123456789abcdef0123456789abcdef01234567"
	if got, want := Line(), "1.2.3-rc1 (commit 0123456789abcdef0123456789abcdef01234567)"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}
