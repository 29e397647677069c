// Package version says which build of coily is running: the version and
// commit scripts/release.sh stamps into a release's binaries, else the
// commit Go recorded from the checkout it built, else "dev". Every binary
// (coily, coily-client, coily-exec, git-remote-coily) prints the same
// Line, which agrees with the release's BUILDINFO.
package version

import (
	"runtime/debug"
	"sync"
)

// Stamped by scripts/release.sh, which builds with -trimpath and without
// VCS information:
//
//	-X coily.dev/coily/version.version=1.2.0
//	-X coily.dev/coily/version.commit=<the commit's hash>
var version, commit string

// Version is the release's version, or "dev" for a build release.sh did
// not stamp.
func Version() string {
	if version == "" {
		return "dev"
	}
	return version
}

// Commit is the commit the binary was built from: the one release.sh
// stamped, else the checkout's that Go recorded (vcs.revision, with
// "-dirty" when the tree had uncommitted changes), else "".
func Commit() string {
	if commit != "" {
		return commit
	}
	return vcsCommit()
}

// Line is what a binary prints after its name for --version: "1.2.0
// (commit HASH)", or just the version when the commit is unknown.
func Line() string {
	return line(Version(), Commit())
}

func line(version, commit string) string {
	if commit == "" {
		return version
	}
	return version + " (commit " + commit + ")"
}

var vcsCommit = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return fromSettings(bi.Settings)
})

// fromSettings is the commit the build settings record, "" when none.
func fromSettings(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
