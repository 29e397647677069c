package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"coily.dev/coily/atomicfile"
	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/regularfile"
)

// A shim is named after a command (gh, git, aws) and runs `coily exec --
// NAME "$@"`: with its directory first on PATH, an agent that types `gh
// issue create …` goes through coily without knowing it. Where coily-exec
// is installed beside coily, a shim is a symbolic link to it (it runs the
// command it is named after, and costs a few milliseconds less than a
// script starting coily); otherwise, or with --script, a small shell
// script whose exec replaces the shell. Either way stdin, stdout, stderr,
// the exit code and signals pass through.

// shimMarker is the second line of every shim: list and remove touch
// only files that carry it.
const shimMarker = "# coily shim: "

// shimNamePattern is what a shim may be called: a bare command name, as
// the server resolves it (policy.IsCommandName; a test keeps them equal).
// Compiled at first use: a counted repetition makes a large program, and
// most runs of the client never need it.
var shimNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$`) })

// DefaultShimDir is where shims go unless told: $XDG_DATA_HOME/coily/shims
// or ~/.local/share/coily/shims.
func DefaultShimDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "coily", "shims")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "coily", "shims")
	}
	return "coily-shims"
}

func (a *App) shimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shim",
		Short: "install, list or remove the shims that send gh, git, aws … through coily",
		Long: `Shims are small executables named after commands (gh, git, aws …) that forward to
` + "`coily exec -- NAME ARGS...`" + `. With their directory first on PATH, an agent uses coily without typing it:
exit codes, stdin (when it is not a terminal), stdout, stderr and Ctrl-C pass through as if the
tool ran locally. Where coily-exec is installed beside coily, a shim is a link to it (it runs the
command it is named after, a few milliseconds sooner); otherwise, or with --script, a two-line
shell script.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { cmd.Help(); return Exit(ExitUsage) },
	}
	cmd.AddCommand(a.shimInstallCmd(), a.shimListCmd(), a.shimRemoveCmd())
	return cmd
}

func (a *App) shimInstallCmd() *cobra.Command {
	var dir string
	var force, script bool
	cmd := &cobra.Command{
		Use:   "install [--dir DIR] [NAME...]",
		Short: "write shims (default: one per command the policy lets you run)",
		Long: `Write a shim per NAME, or without NAMEs one per command the live policy lets you run. A NAME
that is not a bare command name is a usage error; a command of the policy that cannot be a shim
(a rule for an absolute path, a name with a slash or a control character) is skipped with a note
on stderr, and the others are installed.`,
		Example: `  coily shim install                 # every command the live policy lets you run
  coily shim install --dir ~/bin gh git
  export PATH="$HOME/.local/share/coily/shims:$PATH"`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) == 0 {
				err := a.withClient(cmd.Context(), false, func(c *client.Client) error {
					resp, err := c.API.ListCommands(cmd.Context(), &coilyv1.ListCommandsRequest{})
					names = commandNames(resp.GetCommands())
					return err
				})
				if err != nil {
					return err
				}
				if names = a.shimmableNames(names); len(names) == 0 {
					PrintLine(a.Stderr, "%s: no command the policy lets you run can be a shim: none installed", a.Name)
					return Exit(ExitFailure)
				}
			}
			self, err := os.Executable()
			if err == nil {
				self, err = filepath.EvalSymlinks(self)
			}
			if err != nil {
				return fmt.Errorf("where is this program: %w", err)
			}
			fast := ""
			if !script {
				fast = besideSelf(self, fastShimTarget)
			}
			return exit(a.installShims(dir, self, fast, names, force))
		},
	}
	a.shimDirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&force, "force", false, "replace a file of that name that is not a shim")
	Twin(cmd.Flags(), "force", "COILY_SHIM_FORCE")
	cmd.Flags().BoolVar(&script, "script", false, "write shell scripts running coily exec even where coily-exec is installed beside coily (shims are then links to it)")
	Twin(cmd.Flags(), "script", "COILY_SHIM_SCRIPT")
	return cmd
}

// fastShimTarget is the binary a shim links to where it is installed:
// coily-exec runs the command it is called as.
const fastShimTarget = "coily-exec"

// besideSelf is name's path in self's directory, if an executable file is
// there, else "".
func besideSelf(self, name string) string {
	p := filepath.Join(filepath.Dir(self), name)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

func (a *App) shimDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", DefaultShimDir(), "the shim directory (put it first on PATH)")
	DocDefault(Twin(cmd.Flags(), "dir", "COILY_SHIM_DIR"), "$XDG_DATA_HOME/coily/shims or ~/.local/share/coily/shims")
}

// shimmableNames keeps the names the server listed that can be shims,
// saying on stderr which it passes over (an absolute path, or a name no
// shim file could carry: "..", a slash, a leading dash, a control
// character): one unusable rule does not keep the others' shims out.
func (a *App) shimmableNames(names []string) []string {
	var out []string
	for _, n := range names {
		if !a.isShimName(n) {
			PrintLine(a.Stderr, "%s: skipped %q: not a bare command name, so it cannot be a shim", a.Name, n)
			continue
		}
		out = append(out, n)
	}
	return out
}

// isShimName says whether a shim may be called n.
func (a *App) isShimName(n string) bool {
	return shimNamePattern().MatchString(n) && n != "coily" && n != a.Name
}

// installShims writes one shim per name into dir, each by a temporary file
// renamed into place: a link to fast when it is not "", else a script
// running coily at self; a name that is not a command name, or an
// existing file that is not a shim (unless force), is refused.
func (a *App) installShims(dir, self, fast string, names []string, force bool) int {
	if len(names) == 0 {
		PrintLine(a.Stderr, "%s: the policy lets you run no command: no shim to install", a.Name)
		return ExitFailure
	}
	for _, n := range names {
		if !a.isShimName(n) {
			PrintLine(a.Stderr, "%s: %q cannot be a shim: want a command name such as gh", a.Name, n)
			return ExitUsage
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		PrintLine(a.Stderr, "%s: %v", a.Name, err)
		return ExitFailure
	}
	for _, n := range names {
		path := filepath.Join(dir, n)
		if _, isShim, err := readShim(path); !isShim && !errors.Is(err, fs.ErrNotExist) && !force {
			// Something is there (or cannot be read: it may be anyone's).
			PrintLine(a.Stderr, "%s: %s exists and is not a coily shim (--force replaces it)", a.Name, path)
			return ExitFailure
		}
		if fast != "" {
			if err := symlinkAtomic(fast, path); err != nil {
				PrintLine(a.Stderr, "%s: %v", a.Name, err)
				return ExitFailure
			}
			PrintLine(a.Stdout, "%s -> %s", path, fast)
			continue
		}
		if err := atomicfile.Write(path, []byte(shimScript(self, n)), 0o755); err != nil {
			PrintLine(a.Stderr, "%s: %v", a.Name, err)
			return ExitFailure
		}
		PrintLine(a.Stdout, "%s -> %s exec -- %s", path, self, n)
	}
	if !onPathFirst(dir, a.Getenv("PATH")) {
		PrintLine(a.Stdout, "put the shims first on PATH: export PATH=%s:$PATH", shellQuote(dir))
	}
	return ExitOK
}

// shimScript is the shim for name, running coily at self.
func shimScript(self, name string) string {
	return "#!/bin/sh\n" + shimMarker + name + " runs on the coily trust point (coily shim remove " + name + ")\n" +
		"exec " + shellQuote(self) + " exec -- " + name + ` "$@"` + "\n"
}

// readShim reads the shim at path: what it runs, and whether it is one (a
// script with the marker, or a link to a coily-exec).
func readShim(path string) (target string, isShim bool, err error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", false, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		to, err := os.Readlink(path)
		if err != nil {
			return "", false, err
		}
		return to, filepath.Base(to) == fastShimTarget, nil
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return "", false, nil
	}
	f, _, err := regularfile.Open(path) // swapped for a FIFO since the Lstat: refused, not waited on
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var lines []string
	for sc.Scan() && len(lines) < 3 {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 3 || lines[0] != "#!/bin/sh" || !strings.HasPrefix(lines[1], shimMarker) {
		return "", false, nil
	}
	return strings.TrimPrefix(lines[2], "exec "), true, nil
}

func (a *App) shimListCmd() *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--dir DIR]",
		Short: "list the shims in the shim directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			shims, err := listShims(dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if asJSON {
				return writeJSON(a.Stdout, map[string]any{"dir": dir, "shims": shims})
			}
			if len(shims) == 0 {
				PrintLine(a.Stdout, "no shims in %s", dir)
			}
			for _, s := range shims {
				PrintLine(a.Stdout, "%-12s %s", s["name"], s["runs"])
			}
			return nil
		},
	}
	a.shimDirFlag(cmd, &dir)
	jsonFlag(cmd, &asJSON, "the shims")
	return cmd
}

// listShims lists dir's shims, sorted by name.
func listShims(dir string) ([]map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := []map[string]string{}
	for _, e := range entries {
		target, ok, err := readShim(filepath.Join(dir, e.Name()))
		if err == nil && ok {
			out = append(out, map[string]string{"name": e.Name(), "runs": target})
		}
	}
	slices.SortFunc(out, func(x, y map[string]string) int { return strings.Compare(x["name"], y["name"]) })
	return out, nil
}

func (a *App) shimRemoveCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "remove [--dir DIR] [NAME...]",
		Short: "remove shims (default: all of them); other files are left alone",
		RunE: func(cmd *cobra.Command, names []string) error {
			if len(names) == 0 {
				shims, err := listShims(dir)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				for _, s := range shims {
					names = append(names, s["name"])
				}
			}
			for _, n := range names {
				path := filepath.Join(dir, filepath.Base(n))
				if _, ok, err := readShim(path); err != nil || !ok {
					PrintLine(a.Stderr, "%s: %s is not a coily shim; left alone", a.Name, path)
					return Exit(ExitFailure)
				}
				if err := os.Remove(path); err != nil {
					return err
				}
				PrintLine(a.Stdout, "removed %s", path)
			}
			return nil
		},
	}
	a.shimDirFlag(cmd, &dir)
	return cmd
}

// onPathFirst says whether dir comes before every other directory of PATH
// that could hold the same commands (it is the first entry).
func onPathFirst(dir, path string) bool {
	first, _, _ := strings.Cut(path, string(os.PathListSeparator))
	a, _ := filepath.Abs(dir)
	b, _ := filepath.Abs(first)
	return first != "" && a == b
}

// shellQuote quotes s for sh, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// symlinkAtomic makes path a link to target, through a temporary link in
// the same directory renamed into place.
func symlinkAtomic(target, path string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-link")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
