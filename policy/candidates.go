package policy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// A rule's `binary:` is one clean absolute path, or a list of candidate
// paths for the same tool installed in different places (Debian's
// /usr/bin, Homebrew's /opt/homebrew/bin and /usr/local/bin): the first
// candidate that exists on this host when the policy loads is the rule's
// binary. Every candidate has the same base name, the command's name,
// by which a caller may ask for it bare (`gh issue list`): the server,
// never the client, decides which file runs.

// MaxCandidates bounds a rule's candidate paths.
const MaxCandidates = 8

// commandNamePattern is what a bare command name may be: a file name a
// shell would find on PATH, without a slash.
var commandNamePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$`)

// IsCommandName says whether argv0 is a bare command name the policy
// resolves (not a path).
func IsCommandName(argv0 string) bool {
	return commandNamePattern.MatchString(argv0) && argv0 != "." && argv0 != ".."
}

// binaryFile is `binary:` as written: a string or a list of strings.
type binaryFile []string

func (b *binaryFile) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			*b = binaryFile{n.Value}
			return nil
		}
	case yaml.SequenceNode:
		list := binaryFile{}
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode || c.Tag != "!!str" {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: binary: each candidate must be a path", c.Line)}}
			}
			list = append(list, c.Value)
		}
		*b = list
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: binary must be a path or a list of paths", n.Line)}}
}

// check validates the candidates: 1 to MaxCandidates clean absolute paths,
// distinct, sharing one base name (a rule whose name is not a command
// name, such as /usr/bin/[, can only be asked for by path).
func (b binaryFile) check() error {
	switch {
	case len(b) == 0:
		return errors.New("binary must be a clean absolute path or a list of them, got none")
	case len(b) > MaxCandidates:
		return fmt.Errorf("binary lists %d paths, at most %d", len(b), MaxCandidates)
	}
	seen := map[string]bool{}
	for _, p := range b {
		switch {
		case !filepath.IsAbs(p) || filepath.Clean(p) != p:
			return fmt.Errorf("binary must be a clean absolute path, got %q", p)
		case seen[p]:
			return fmt.Errorf("binary lists %q twice", p)
		case path.Base(p) != path.Base(b[0]):
			return fmt.Errorf("binary candidates must name one command: %q is not called %q", p, path.Base(b[0]))
		}
		seen[p] = true
	}
	return nil
}

// resolveCandidates picks the first candidate that exists on this host and
// resolves it (resolveBinary, the pin checked); with none present, the
// first candidate and why it is absent.
func resolveCandidates(candidates []string, pin string) (binary, resolved string, absent error) {
	if len(candidates) == 0 {
		return "", "", errors.New("no binary")
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err != nil { // a dangling link is not present
			continue
		}
		resolved, absent = resolveBinary(c, pin)
		return c, resolved, absent
	}
	if len(candidates) == 1 {
		_, absent = resolveBinary(candidates[0], pin)
		return candidates[0], "", absent
	}
	return candidates[0], "", fmt.Errorf("none of the binary's candidates %v is on this host", candidates)
}

// Command is the rule's command name: the base name of its binary, by
// which callers may ask for it bare.
func (r *Rule) Command() string { return path.Base(r.Binary) }
