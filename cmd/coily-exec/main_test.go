package main

import (
	"io"
	"slices"
	"testing"
)

// commandLine decides what runs from argv alone: what an agent or a
// repository can put there (a shim's name, flags, a command that looks
// like one, nothing) never makes coily-exec run something other than
// the command line given, or drop an argument.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		argv  []string
		whole bool
		code  int
	}{
		{[]string{"/usr/bin/coily-exec", "--", "gh", "--version"}, []string{"gh", "--version"}, false, 0},
		{[]string{"coily-exec", "gh", "issue", "list"}, []string{"gh", "issue", "list"}, false, 0},
		{[]string{"coily-exec", "--", "--", "x"}, []string{"--", "x"}, false, 0}, // only the first -- is ours
		{[]string{"coily-exec", "--timeout", "1s", "gh"}, nil, false, exitUsage},
		{[]string{"coily-exec", "-x"}, nil, false, exitUsage},
		{[]string{"coily-exec"}, nil, false, exitUsage},
		{[]string{"coily-exec", "--"}, nil, false, exitUsage},
		{[]string{}, nil, false, exitUsage},
		{[]string{"coily-exec", "--help"}, nil, false, 0},
		{[]string{"coily-exec", "--version"}, nil, false, 0},
		{[]string{"/home/a/shims/gh", "--help"}, []string{"gh", "--help"}, false, 0}, // every argument is the tool's
		{[]string{"gh", "--", "-x"}, []string{"gh", "--", "-x"}, false, 0},
		{[]string{"coily-exec.1", "git", "status"}, []string{"git", "status"}, false, 0},
		{[]string{"/usr/local/bin/coily", "exec", "--", "gh", "pr"}, []string{"gh", "pr"}, false, 0},
		{[]string{"coily", "exec", "--"}, nil, true, 0},
		{[]string{"coily", "exec", "--timeout", "1s", "--", "gh"}, nil, true, 0},
		{[]string{"coily", "--socket", "/s", "exec", "--", "gh"}, nil, true, 0},
		{[]string{"coily", "status"}, nil, true, 0},
		{[]string{"coily"}, nil, true, 0},
	} {
		argv, whole, code := commandLine(tc.args, io.Discard, io.Discard)
		if !slices.Equal(argv, tc.argv) || whole != tc.whole || code != tc.code {
			t.Errorf("commandLine(%q) = %q, %v, %d; want %q, %v, %d", tc.args, argv, whole, code, tc.argv, tc.whole, tc.code)
		}
	}
}
