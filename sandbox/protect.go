package sandbox

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
)

// The protected classes (docs/sandbox.md, "Protected paths"): what the host
// will later execute or load as configuration stays read-only inside every
// writable root, unless the rule names it in Profile.Writable.

// GitName is the name of a git control entry: a directory (a repository's
// git directory) or a file (a gitfile pointing elsewhere: worktrees,
// submodules).
const GitName = ".git"

// ProtectedNames are protected at the top of every writable root and of
// every git work tree found in one: where shells, direnv, editors, package
// managers and git look for configuration that runs code or redirects
// credentials. A name that does not exist yet and is created by a command
// is quarantined after it (see QuarantineSuffix).
var ProtectedNames = slices.Concat([]string{
	// git, beyond the control directory itself; Mercurial's control
	// directory (.hg/hgrc runs hooks).
	".gitconfig", ".gitmodules", ".config/git", ".hg",
	// Shells and direnv.
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".envrc",
	// git hooks kept in the work tree (husky, core.hooksPath conventions).
	".husky", ".githooks",
	// Editors: task, launch and settings files run commands on open.
	".vscode", ".idea", ".devcontainer", ".exrc", ".nvimrc", ".nvim.lua",
	// Package managers: scripts, shells, registries and runners.
	".pypirc", ".pip", ".config/pip", ".bundle/config", ".gemrc",
	// Keys and tool credentials.
	".ssh", ".docker", ".gnupg",
	// Git hook managers: the hooks they install run what these name.
	// pre-commit (and prek, which also reads .yml) reads its config at the
	// top of the work tree, and a hook repository's manifest there.
	".pre-commit-config.yaml", ".pre-commit-config.yml", ".pre-commit-hooks.yaml",
	// lefthook runs scripts from .lefthook/ and .lefthook-local/.
	".lefthook", ".lefthook-local",
	// mise's configuration directory (hooks, env._.source run code).
	".config/mise",
}, lefthookConfigs())

// lefthookConfigs are the file names lefthook reads its configuration
// from (https://lefthook.dev/configuration): lefthook or lefthook-local,
// with or without a leading dot, or in .config/ without it, in any of its
// formats.
func lefthookConfigs() []string {
	var out []string
	for _, base := range []string{"lefthook", "lefthook-local"} {
		for _, ext := range []string{"yml", "yaml", "toml", "json", "jsonc"} {
			name := base + "." + ext
			out = append(out, name, "."+name, ".config/"+name)
		}
	}
	return out
}

// AnyDepthNames are protected wherever they are in a writable root but
// inside dependency trees (node_modules): tools read them from every
// directory up from where they run (direnv, cargo, yarn, mise) or from
// each package of a monorepo (npm, pnpm, bun).
var AnyDepthNames = []string{".envrc", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml", ".cargo",
	"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml"}

// GitDirCodeNames are the entries of a git directory through which git
// runs code or reads configuration: hooks, config (core.hooksPath,
// core.fsmonitor, aliases, filters…), the per-worktree config, info
// (attributes select drivers), and commondir (which redirects all of it).
// In a git directory a rule may write (Writable ".git"), these stay
// read-only unless named as ".git/NAME".
var GitDirCodeNames = []string{"config", "config.worktree", "hooks", "info", "commondir"}

// QuarantineSuffix is inserted into the name of a protected entry that a
// command created: after the command, NAME becomes
// NAME.coily-quarantine-ID, inert for git, shells and editors, and kept
// for the owner to inspect.
const QuarantineSuffix = ".coily-quarantine-"

// WritableNames lists what Profile.Writable (a rule's `writable:`) may
// name: ".git" (the data of git directories: objects, refs, index…, and
// creating new repositories), ".git/NAME" for each GitDirCodeNames, and
// each ProtectedNames.
func WritableNames() []string {
	out := []string{GitName}
	for _, n := range GitDirCodeNames {
		out = append(out, GitName+"/"+n)
	}
	return append(append(out, ProtectedNames...), AnyDepthNames...)
}

// CheckWritable reports an unknown name in a Writable list.
func CheckWritable(names []string) error {
	known := WritableNames()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("writable: %q is not a protected name (want one of %s)", n, strings.Join(known, ", "))
		}
	}
	return nil
}

// isProtectedName reports whether rel, relative to a work tree root, is
// one of ProtectedNames.
func isProtectedName(rel string) bool { return slices.Contains(ProtectedNames, rel) }

// protectedParents are the first components of the multi-component
// ProtectedNames (".config", ".bundle"): the scan looks inside them at a
// work tree root, and a link there is refused like one at a protected
// name.
func protectedParents() []string {
	var out []string
	for _, n := range ProtectedNames {
		if first, _, ok := strings.Cut(n, "/"); ok && !slices.Contains(out, first) {
			out = append(out, first)
		}
	}
	return out
}

// entryKind classifies a protected entry.
type entryKind int

const (
	kindGitDir  entryKind = iota // a .git directory or a bare repository
	kindGitFile                  // a .git file (gitfile)
	kindGitCode                  // hooks, config… inside a writable git directory
	kindName                     // one of ProtectedNames at a work tree root, or of AnyDepthNames
	kindNamed                    // named by a protected git config: core.hooksPath, include.path
)

// protected is one protected entry of a writable root.
type protected struct {
	rel      string // relative to the root
	kind     entryKind
	dir      bool
	writable bool     // bound read-write (still its own mount point)
	dev, ino uint64   // identity when scanned
	file     *os.File // O_PATH, when the scan opens what it finds
}

// optName is the Writable name that opts an entry in.
func (e protected) optName() string {
	switch e.kind {
	case kindGitDir, kindGitFile:
		return GitName
	case kindGitCode:
		return GitName + "/" + path.Base(e.rel)
	case kindNamed:
		return GitName + "/hooks"
	}
	for _, n := range slices.Concat(ProtectedNames, AnyDepthNames) {
		if e.rel == n || len(e.rel) > len(n) && e.rel[len(e.rel)-len(n)-1:] == "/"+n {
			return n
		}
	}
	return path.Base(e.rel)
}

// writableRoot is a host directory bound read-write, with what its scan
// found before the command ran.
type writableRoot struct {
	path  string
	dir   *os.File
	found []protected
}
