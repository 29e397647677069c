package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// WriteReference writes the command reference (docs/cli.md) from the
// command tree itself, so that it cannot drift from what the program
// accepts: every command with its usage, description, examples and flags,
// each flag with its environment twin and default.
func WriteReference(w io.Writer, root *cobra.Command) error {
	root.InitDefaultCompletionCmd() // cobra adds it when it runs; the reference shows it too
	var b strings.Builder
	fmt.Fprintf(&b, "# %s command reference\n\n", root.Name())
	b.WriteString("Generated from the command tree of the development build by\n" +
		"`go test -tags coilydev ./cmd/coily -run TestCLIReference -update`; do not edit by hand. The lean\n" +
		"`coily-client` has the commands for agents and owners; `coily dev` and `--dev` are in development\n" +
		"builds only (`-tags coilydev`, as `scripts/dev.sh` builds). `coily-exec [--] COMMAND ARG...` (the shims'\n" +
		"client, without flags: `coily-exec --help`) is `coily exec -- COMMAND ARG...` on the local socket, and\n" +
		"hands every other case to it.\n\n")
	fmt.Fprintf(&b, "%s\n\n", root.Long)
	b.WriteString(exitCodesSection)
	fmt.Fprintf(&b, "## Global flags\n\nAccepted by every command, before or after its name.\n\n")
	flagTable(&b, root.PersistentFlags())
	walk(root, func(c *cobra.Command) {
		if c == root || c.Hidden || c.Name() == "help" {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n%s.\n\n```\n%s\n```\n\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."), c.UseLine())
		if c.Long != "" {
			fmt.Fprintf(&b, "%s\n\n", c.Long)
		}
		if c.Example != "" {
			fmt.Fprintf(&b, "Examples:\n\n```sh\n%s\n```\n\n", c.Example)
		}
		if c.HasAvailableLocalFlags() {
			flagTable(&b, c.LocalFlags())
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// walk visits c and its commands, depth first, in name order.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	subs := c.Commands()
	slices.SortFunc(subs, func(x, y *cobra.Command) int { return strings.Compare(x.Name(), y.Name()) })
	for _, s := range subs {
		walk(s, f)
	}
}

func flagTable(b *strings.Builder, fs *pflag.FlagSet) {
	b.WriteString("| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		env := EnvOf(f)
		if env != "" {
			env = "`" + env + "`"
		}
		usage := strings.TrimSuffix(f.Usage, " (env "+EnvOf(f)+")")
		def := f.DefValue
		switch doc := f.Annotations[docDefaultAnnotation]; {
		case len(doc) == 1:
			def = doc[0]
		case def == "" || def == "[]" || def == "0s" || def == "false" && f.Value.Type() == "bool":
			def = ""
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, env, def, strings.ReplaceAll(usage, "|", "\\|"))
	})
	b.WriteString("\n")
}

const exitCodesSection = `## Exit codes

| code | meaning |
| --- | --- |
| the command's own | ` + "`exec`" + `: the command ran and exited with it |
| 128+N | ` + "`exec`" + `: the command was killed by signal N (or coily exec itself was interrupted by signal N: Ctrl-C gives 130) |
| 124 | ` + "`exec`" + `: the command ran out of time (` + "`command-timeout`" + `) and was killed |
| 125 | coily refused or could not run the request: stderr says ` + "`coily: refused (CODE): message`" + ` (with ` + "`--json`" + `, one JSON object ` + "`{code, message, audit_id, retry_after_ms}`" + `) |
| 69 | the server could not be reached (no socket, no route, the tailnet down): ` + "`coily: server unreachable: …`" + ` |
| 3 | ` + "`serve`, `dev`, `state rebuild`, `audit repair`" + `: another process holds the state directory; nothing was changed |
| 2 | usage error: unknown command or flag, a bad value (also in a ` + "`COILY_*`" + ` variable), ` + "`exec`" + ` without ` + "`--`" + ` before the command, ` + "`--tsnet`" + ` without ` + "`--server`" + `, a ` + "`--server`" + ` that is not HOST[:PORT] with a port from 1 to 65535 (or a list of them, at most 16, none twice) |
| 1 | a command other than ` + "`exec`" + ` failed (` + "`audit verify`" + ` found a break, ` + "`policy check`" + ` found an error, ` + "`serve`" + ` could not start) |
| 0 | success |

`
