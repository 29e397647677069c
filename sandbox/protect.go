package sandbox

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"
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
// is quarantined after it (see QuarantineDir).
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
var AnyDepthNames = slices.Concat([]string{".envrc", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml", ".cargo",
	"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml"},
	AgentNames, AutoloadNames)

// AgentNames are what AI coding agents and agent-driven editors load from
// the folder they are started in (any folder of a monorepo): hooks and
// commands they run (.claude/settings.json, .gemini/settings.json, Kiro's
// hooks, opencode's plugins), the MCP servers they start (.mcp.json,
// .cursor/mcp.json, .roo/mcp.json, .continue/mcpServers), the lint and
// test commands aider runs (.aider.conf.yml), and editors' tasks and
// language servers (.zed, .helix). ".aider*" is a prefix.
var AgentNames = []string{".claude", ".mcp.json", ".cursor", ".cursorrules", ".codex", ".gemini", ".windsurf",
	".windsurfrules", ".continue", ".roo", ".roomodes", ".clinerules", ".kiro", ".amazonq", ".junie", ".opencode",
	"opencode.json", "opencode.jsonc", ".crush.json", "crush.json", ".aider*", ".zed", ".helix", ".lazy.lua"}

// AutoloadNames are loaded by tools as they start in a directory or one
// below it: Emacs's directory variables (eval: runs Lisp), dotenv files
// (read by direnv's dotenv, mise, docker compose, python-dotenv, editors'
// Python and Node integrations: NODE_OPTIONS, PYTHONSTARTUP or
// LD_PRELOAD there run code), and a Python virtual environment (uv, poetry
// and editors run .venv/bin/python as they open the project). ".env.*" is
// a prefix.
var AutoloadNames = []string{".dir-locals.el", ".dir-locals-2.el", ".env", ".env.*", ".flaskenv", ".venv"}

// anyDepth holds AnyDepthNames without their prefixes, for lookups.
var anyDepth = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range AnyDepthNames {
		if !strings.HasSuffix(n, "*") {
			m[n] = true
		}
	}
	return m
}()

// anyDepthName returns the AnyDepthNames entry name matches ("" if
// none): itself, or a prefix pattern (".env.*", ".aider*").
func anyDepthName(name string) string {
	switch {
	case anyDepth[name]:
		return name
	case strings.HasPrefix(name, ".env.") && len(name) > len(".env."):
		return ".env.*"
	case strings.HasPrefix(name, ".aider"):
		return ".aider*"
	}
	return ""
}

// GitDirCodeNames are the entries of a git directory through which git
// runs code or reads configuration: hooks, config (core.hooksPath,
// core.fsmonitor, aliases, filters…), the per-worktree config, info
// (attributes select drivers), and commondir (which redirects all of it).
// In a git directory a rule may write (Writable ".git"), these stay
// read-only unless named as ".git/NAME".
var GitDirCodeNames = slices.Concat([]string{"config", "config.worktree", "hooks", "info", "commondir"}, GitStateNames)

// GitStateNames are a git directory's operation state (git's path.c,
// sequencer.c, bisect.c, notes-merge.c): what `git rebase --continue`,
// `git cherry-pick --continue`, `git am --continue`, `git merge
// --continue`, `git commit` or `git bisect` on the host picks up and acts
// on. An interactive rebase's todo list runs its `exec` lines; a merge or
// squash message becomes the owner's commit's. Protected like the code
// entries, even in a git directory the rule may write: read-only when
// present, quarantined once created, unless named as ".git/NAME".
var GitStateNames = []string{"rebase-merge", "rebase-apply", "sequencer", "REBASE_HEAD",
	"MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_AUTOSTASH", "MERGE_RR", "AUTO_MERGE", "SQUASH_MSG",
	"CHERRY_PICK_HEAD", "REVERT_HEAD",
	"BISECT_LOG", "BISECT_START", "BISECT_TERMS", "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK",
	"BISECT_NAMES", "BISECT_HEAD", "BISECT_RUN", "BISECT_FIRST_PARENT",
	"NOTES_MERGE_PARTIAL", "NOTES_MERGE_REF", "NOTES_MERGE_WORKTREE"}

// gitCodeName returns the Writable name (".git/NAME") that opts in the
// git directory entry name, "" when it is no code or state entry. A
// BISECT_ name git adds later counts too (".git/BISECT_*").
func gitCodeName(name string) string {
	switch {
	case slices.Contains(GitDirCodeNames, name):
		return GitName + "/" + name
	case strings.HasPrefix(name, "BISECT_"):
		return GitName + "/BISECT_*"
	}
	return ""
}

// QuarantineDir is the server's own directory at the top of every named
// workspace: the protected entries a command created, and what it left
// that the next scan could not cover (too deep, too many entries), are
// moved there after it, under short names the server chooses (REQUEST-N),
// with a manifest per command (REQUEST.json) naming where each was. It is
// made before the first command, mode 0700, and hidden from every command
// (an empty read-only tmpfs over it), so no command can read, change or
// fill it; the scans skip it.
const QuarantineDir = ".coily-quarantine"

// ScanBudget bounds a scan of a writable root. Before the command, a
// workspace beyond it refuses the command; after it, what lies beyond the
// entries is moved aside when the command made it, and a scan that still
// cannot finish within the budget leaves the workspace refused until its
// owner has looked (Report.Unchecked).
type ScanBudget struct {
	// Time bounds each scan (default 60 s).
	Time time.Duration
	// Entries bounds the entries the scan before a command covers
	// (default 500 000); the scan after a command covers up to four times
	// as many, moving aside the directories the command made past the
	// bound.
	Entries int
}

// Default scan bounds; directories deeper than ScanMaxDepth are refused
// before a command and moved aside after it.
const (
	DefaultScanTime    = 60 * time.Second
	DefaultScanEntries = 500_000
	ScanMaxDepth       = 64
)

// WithDefaults fills zero fields with the defaults.
func (b ScanBudget) WithDefaults() ScanBudget {
	if b.Time <= 0 {
		b.Time = DefaultScanTime
	}
	if b.Entries <= 0 {
		b.Entries = DefaultScanEntries
	}
	return b
}

// WritableNames lists what Profile.Writable (a rule's `writable:`) may
// name: ".git" (the data of git directories: objects, refs, index…, and
// creating new repositories), ".git/NAME" for each GitDirCodeNames, and
// each ProtectedNames.
func WritableNames() []string {
	out := []string{GitName}
	for _, n := range GitDirCodeNames {
		out = append(out, GitName+"/"+n)
	}
	out = append(out, GitName+"/BISECT_*")
	return append(append(out, ProtectedNames...), AnyDepthNames...)
}

// CheckWritable reports an unknown name in a Writable list.
func CheckWritable(names []string) error {
	known := WritableNames()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("writable: %q is not a protected name (want .git, .git/NAME for one of %s, or a protected name such as .vscode, .envrc, .env, .claude, .venv: docs/sandbox.md lists them)", n, strings.Join(GitDirCodeNames[:5], ", ")+", git's operation state")
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
	writable bool     // the rule may write it: a directory bound read-write, a file not bound
	link     bool     // a symbolic link
	dev, ino uint64   // identity when scanned
	file     *os.File // O_PATH, when the scan opens what it finds
}

// optName is the Writable name that opts an entry in.
func (e protected) optName() string {
	switch e.kind {
	case kindGitDir, kindGitFile:
		return GitName
	case kindGitCode:
		return gitCodeName(path.Base(e.rel))
	case kindNamed:
		return GitName + "/hooks"
	}
	for _, n := range ProtectedNames {
		if e.rel == n || len(e.rel) > len(n) && e.rel[len(e.rel)-len(n)-1:] == "/"+n {
			return n
		}
	}
	if n := anyDepthName(path.Base(e.rel)); n != "" {
		return n
	}
	return path.Base(e.rel)
}

// bare reports a git directory git would take for a bare repository: one
// not named .git (those of submodules and worktrees are not entries).
func (e protected) bare() bool {
	return e.kind == kindGitDir && path.Base(e.rel) != GitName
}

// writableRoot is a host directory bound read-write, with what its scan
// found before the command ran.
type writableRoot struct {
	path       string
	dir        *os.File
	quarantine *os.File // its QuarantineDir
	found      []protected
}

// close closes the root's descriptors.
func (r *writableRoot) close() {
	r.dir.Close()
	if r.quarantine != nil {
		r.quarantine.Close()
	}
}
