package policy

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Tool knowledge (docs/policy.md, "What coily knows about git and gh"):
// some tools have indirections of their own — options that load other
// configuration or run other programs, aliases, spellings that mean
// something else — through which a command could do what the rules deny,
// or run code of the caller's while a credential is in its environment.
// For those tools the arguments are vetted and normalised before any rule
// is matched: what the rules see is what the tool will do.

// toolVet vets and normalises the arguments (argv[1:]) of a known tool; an
// unknown binary's arguments pass unchanged. A non-empty reason refuses the
// request whatever the rules say.
func toolVet(bin, argv0 string, args []string) (normalised []string, reason string) {
	switch name := toolName(bin, argv0); name {
	case "git":
		return vetGit(args)
	case "gh":
		return vetGh(args)
	}
	return args, ""
}

func toolName(bin, argv0 string) string {
	for _, p := range []string{bin, argv0} {
		if b := path.Base(p); b == "git" || b == "gh" {
			return b
		}
	}
	return ""
}

// gitGlobalRefused are git's options before the subcommand that load
// other configuration, point git at other repositories or programs, or run
// a pager: refused, whatever the rule (a rule cannot list them).
var gitGlobalRefused = map[string]bool{
	"-c": true, "--config-env": true, "-C": true, "--exec-path": true, "--git-dir": true, "--work-tree": true,
	"--namespace": true, "--super-prefix": true, "-p": true, "--paginate": true, "--bare": true,
	"--attr-source": true, "--list-cmds": true,
}

// gitGlobalHarmless are git's options before the subcommand that change
// nothing a rule cares about: dropped before matching.
var gitGlobalHarmless = map[string]bool{
	"-P": true, "--no-pager": true, "--no-replace-objects": true, "--literal-pathspecs": true,
	"--glob-pathspecs": true, "--noglob-pathspecs": true, "--icase-pathspecs": true,
	"--no-optional-locks": true, "--no-lazy-fetch": true, "--no-advice": true,
}

// gitBuiltins are git's own commands, but those that hand out credentials
// (credential), run hooks and tools on request (hook, citool), or speak
// the transfer protocol beneath push and fetch (send-pack forces with
// --force, --mirror or a + refspec no push obligation names; fetch-pack,
// send-pack, upload-pack and receive-pack run the program --exec or
// --upload-pack names, and receive-pack runs the repository's hooks).
// Anything
// else is an alias (which can run a shell command), a program git-NAME
// found on the PATH, or a typo that help.autocorrect would turn into
// another command: refused.
var gitBuiltins = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr
		check-ignore check-mailmap check-ref-format checkout checkout-index cherry cherry-pick clean clone
		column commit commit-graph commit-tree config count-objects describe diagnose diff diff-files
		diff-index diff-tree difftool fast-export fast-import fetch fmt-merge-msg for-each-ref
		for-each-repo format-patch fsck gc get-tar-commit-id grep hash-object help index-pack init
		interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base
		merge-file merge-index merge-tree mktag mktree multi-pack-index mv name-rev notes pack-objects pack-redundant
		pack-refs patch-id prune prune-packed pull push range-diff read-tree rebase reflog remote
		repack replace rerere reset restore rev-list rev-parse revert rm shortlog show show-branch
		show-index show-ref sparse-checkout stash status stripspace submodule switch symbolic-ref tag unpack-file
		unpack-objects update-index update-ref update-server-info upload-archive var verify-commit
		verify-pack verify-tag version whatchanged worktree write-tree`) {
		gitBuiltins[c] = true
	}
}

// gitRunsPrograms are options, per subcommand, that name a program for git
// to run or a template directory of hooks: refused. (push's -u is
// --set-upstream; clone's and fetch's -u is --upload-pack.)
var gitRunsPrograms = map[string][]string{
	"push":      {"--receive-pack", "--exec"},
	"fetch":     {"--upload-pack"},
	"pull":      {"--upload-pack"},
	"clone":     {"--upload-pack", "-u", "--template", "-c", "--config"},
	"init":      {"--template"},
	"ls-remote": {"--upload-pack", "--exec"},
	"archive":   {"--exec"},
	"rebase":    {"--exec", "-x"},
	"difftool":  {"--extcmd", "-x"},
	"grep":      {"--open-files-in-pager", "-O"},
}

// gitRunsWords are subcommands' words that run a command given to them.
var gitRunsWords = map[string][]string{"bisect": {"run"}, "submodule": {"foreach"}}

// gitTakesRemote are the subcommands whose first positional argument is a
// remote (a name or a URL).
var gitTakesRemote = map[string]bool{"push": true, "fetch": true, "pull": true, "ls-remote": true, "clone": true}

func vetGit(args []string) ([]string, string) {
	var out []string
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		name, _, _ := strings.Cut(args[i], "=")
		switch {
		case gitGlobalRefused[name]:
			return nil, fmt.Sprintf("git option %s is refused: it changes git's configuration, repository or programs (coily's built-in rule for git)", name)
		case gitGlobalHarmless[name]:
		case args[i] == "--version" || args[i] == "--help" || args[i] == "-h" || args[i] == "-v":
			return args, ""
		default:
			return nil, fmt.Sprintf("git option %s before the command is not one coily knows; refused", QuoteShort(args[i]))
		}
	}
	if i == len(args) {
		return out, ""
	}
	sub := args[i]
	if !gitBuiltins[sub] {
		return nil, fmt.Sprintf("%s is not a git command: aliases, git-%s programs and autocorrected spellings are refused (coily's built-in rule for git)", QuoteShort(sub), QuoteShort(sub))
	}
	rest := args[i+1:]
	for j, a := range rest {
		if a == "--" {
			break
		}
		if o := gitRefusedOption(gitRunsPrograms[sub], a); o != "" {
			return nil, fmt.Sprintf("git %s %s is refused: it runs a program or installs hooks (coily's built-in rule for git)", sub, o)
		}
		if slices.Contains(gitRunsWords[sub], a) {
			return nil, fmt.Sprintf("git %s %s is refused: it runs a command (coily's built-in rule for git)", sub, a)
		}
		if sub == "remote" && (a == "add" || a == "set-url") {
			for _, u := range rest[j+1:] {
				if !strings.HasPrefix(u, "-") {
					if why := gitUnsafeRemote(u); why != "" {
						return nil, why
					}
				}
			}
		}
	}
	out = append(out, sub)
	if gitTakesRemote[sub] {
		if r := firstPositional(rest); r != "" {
			if why := gitUnsafeRemote(r); why != "" {
				return nil, why
			}
		}
	}
	if sub == "push" {
		return append(out, normalisePush(rest)...), ""
	}
	return append(out, rest...), ""
}

// gitRefusedOption returns the option of refused that arg spells, "" if
// none: git reads a long option from any unambiguous prefix (--templ for
// --template) and bundles short ones (-qx for -q -x), so those count too.
func gitRefusedOption(refused []string, arg string) string {
	name, _, _ := strings.Cut(arg, "=")
	for _, o := range refused {
		switch {
		case name == o:
			return o
		// git takes any unambiguous abbreviation of a long option, one
		// letter too (git push --m is --mirror, git clone --u=CMD is
		// --upload-pack): every prefix counts, ambiguous ones as well.
		case strings.HasPrefix(o, "--") && strings.HasPrefix(name, "--") && len(name) >= 3 && strings.HasPrefix(o, name):
			return o
		case len(o) == 2 && len(arg) > 2 && arg[0] == '-' && arg[1] != '-' && strings.ContainsRune(arg[1:], rune(o[1])):
			return o
		}
	}
	return ""
}

// normalisePush makes push's implicit forms explicit for the rules: a
// refspec "+src:dst" forces (--force), one with an empty source ":dst"
// deletes (--delete), --mirror does both (it force-updates and deletes
// every remote ref to match) and --prune deletes. Refspecs after "--"
// count too. The flags are appended at the end, before any "--", so that
// rules read them as flags.
func normalisePush(rest []string) []string {
	var out []string
	var force, del, ended bool
	positional := 0
	for _, a := range rest {
		if a == "--" && !ended {
			// What follows is positional: refspecs still (git push
			// origin -- +main forces).
			ended = true
			out = append(out, a)
			continue
		}
		if !ended && strings.HasPrefix(a, "-") && a != "-" {
			switch gitRefusedOption([]string{"--mirror", "--prune"}, a) {
			case "--mirror":
				force, del = true, true
			case "--prune":
				del = true
			}
			out = append(out, a)
			continue
		}
		positional++
		if positional > 1 { // refspecs follow the remote
			if s, ok := strings.CutPrefix(a, "+"); ok {
				force, a = true, s
			}
			if strings.HasPrefix(a, ":") {
				del = true
			}
		}
		out = append(out, a)
	}
	var implied []string
	if force {
		implied = append(implied, "--force")
	}
	if del {
		implied = append(implied, "--delete")
	}
	end := slices.Index(out, "--")
	if end < 0 {
		end = len(out)
	}
	return slices.Insert(out, end, implied...)
}

// configMayForce reads a push that may force by the repository's
// configuration as forced: one that names no refspec pushes what
// remote.NAME.push names, where a + forces, or mirrors by
// remote.NAME.mirror, without a flag. The caller applies it where some
// rule may write .git/config, so that a force push's obligation binds
// `git push` and `git push origin` there (a push with refspecs, --all or
// --tags reads no pushing configuration: git refuses a configured mirror
// beside them). A flag that takes its value apart (-o, --push-option,
// --repo) may hide which word is a refspec: read as forced too.
func configMayForce(args []string) []string {
	if len(args) == 0 || args[0] != "push" {
		return args
	}
	positional, hidden, ended := 0, false, false
	for _, a := range args[1:] {
		switch {
		case a == "--" && !ended:
			ended = true
		case !ended && strings.HasPrefix(a, "-") && a != "-":
			if gitRefusedOption([]string{"--all", "--branches", "--tags"}, a) != "" {
				return args
			}
			_, _, withValue := strings.Cut(a, "=")
			long := gitRefusedOption([]string{"--push-option", "--repo"}, a) != ""
			short := a[1] != '-' && strings.ContainsRune(a[1:], 'o')
			hidden = hidden || (long && !withValue) || short
		default:
			positional++
		}
	}
	if positional > 1 && !hidden {
		return args
	}
	end := slices.Index(args, "--")
	if end < 0 {
		end = len(args)
	}
	return slices.Insert(slices.Clone(args), end, "--force")
}

// firstPositional is the first argument that is not an option (a guess:
// an option's separate value would be taken for it, which only makes the
// remote check stricter).
func firstPositional(args []string) string {
	for _, a := range args {
		if a == "--" {
			return ""
		}
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// gitUnsafeRemote refuses remotes through which git runs code: a remote
// helper ("ext::sh -c …", "fd::", any "TRANSPORT::ADDRESS" runs
// git-remote-TRANSPORT), and local repositories (a path or file://), whose
// hooks run on push (receive-pack) in the command's sandbox with its
// credentials.
func gitUnsafeRemote(r string) string {
	switch {
	case strings.Contains(r, "::"):
		return fmt.Sprintf("git remote %s is refused: remote helpers (TRANSPORT::ADDRESS, ext::, fd::) run programs (coily's built-in rule for git)", QuoteShort(r))
	case strings.HasPrefix(r, "file:"), strings.HasPrefix(r, "/"), strings.HasPrefix(r, "./"), strings.HasPrefix(r, "../"),
		strings.HasPrefix(r, "~"), r == "." || r == "..":
		return fmt.Sprintf("git remote %s is refused: a local repository runs its own hooks (coily's built-in rule for git)", QuoteShort(r))
	}
	return ""
}

// ghRefused are gh's commands that print or hand out the token it holds,
// or run code coily cannot vet: refused whatever the rules say. Each is
// the first word and, for auth, any later one.
var ghRefused = map[string][]string{
	"auth":       {"token", "git-credential"},
	"extension":  nil,
	"extensions": nil,
	"ext":        nil,
}

func vetGh(args []string) ([]string, string) {
	pos := ghPositionals(args)
	if len(pos) == 0 {
		return args, ""
	}
	if words, ok := ghRefused[pos[0]]; ok {
		if words == nil {
			return nil, fmt.Sprintf("gh %s is refused: extensions run code coily did not vet (coily's built-in rule for gh)", pos[0])
		}
		for _, w := range pos[1:] {
			if slices.Contains(words, w) {
				return nil, fmt.Sprintf("gh %s %s is refused: it hands out the token (coily's built-in rule for gh)", pos[0], w)
			}
		}
	}
	if pos[0] == "auth" && slices.Contains(pos[1:], "status") {
		for _, a := range args {
			name, _, _ := strings.Cut(a, "=")
			if name == "--show-token" || !strings.HasPrefix(a, "--") && strings.HasPrefix(a, "-") && strings.Contains(a, "t") {
				return nil, "gh auth status --show-token is refused: it prints the token (coily's built-in rule for gh)"
			}
		}
	}
	if pos[0] == "repo" && len(pos) > 1 && (pos[1] == "clone" || pos[1] == "fork") && slices.Contains(args, "--") {
		return nil, fmt.Sprintf("gh repo %s with git options after -- is refused: they can install hooks or run programs (coily's built-in rule for gh)", pos[1])
	}
	if pos[0] == "alias" && slices.Contains(pos[1:], "set") {
		for _, a := range args {
			if a == "--shell" || !strings.HasPrefix(a, "--") && strings.HasPrefix(a, "-") && strings.Contains(a, "s") {
				return nil, "gh alias set --shell is refused: a shell alias runs code (coily's built-in rule for gh)"
			}
		}
	}
	return args, ""
}

// ghPositionals lists gh's arguments that are not options (gh's value
// options are written --name=value or take the next word; a leading word
// never does, so the command words come first).
func ghPositionals(args []string) []string {
	var out []string
	for _, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// RefusedForms says, one sentence each, which forms of a tool's command
// line are refused whatever a rule allows (for `coily agents-md`).
func RefusedForms() []string {
	var runs []string
	for _, sub := range slices.Sorted(maps.Keys(gitRunsPrograms)) {
		runs = append(runs, "git "+sub+" "+strings.Join(gitRunsPrograms[sub], ", "))
	}
	for _, sub := range slices.Sorted(maps.Keys(gitRunsWords)) {
		runs = append(runs, "git "+sub+" "+strings.Join(gitRunsWords[sub], ", "))
	}
	return []string{
		"git options before the subcommand that load other configuration or point git elsewhere: " + strings.Join(slices.Sorted(maps.Keys(gitGlobalRefused)), ", "),
		"git aliases, and git-NAME programs other than git's own commands",
		"options and words that make git run a program or install hooks: " + strings.Join(runs, "; "),
		"gh commands that hand out the token: gh auth token, gh auth git-credential, gh auth status --show-token",
		"gh commands that run code coily cannot vet: gh extension (ext, extensions), gh alias set --shell, gh repo clone or fork with git options after --",
	}
}
