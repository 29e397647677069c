package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func (a *App) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show the server's state and who you are to it",
		Long: `Show the server's version, who you are to it (principal, transport, roles, permissions),
the lockout and pause states, what runs, the policy in force and the sandboxes it uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				st, err := c.API.Status(ctx, &coilyv1.StatusRequest{})
				if err != nil {
					return err
				}
				if asJSON {
					return a.printProto(st)
				}
				printStatus(a.Stdout, st)
				return nil
			})
		},
	}
	jsonFlag(cmd, &asJSON, "the status")
	return cmd
}

// printProto writes m as indented JSON, terminal-safe, every field shown.
func (a *App) printProto(m proto.Message) error {
	out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.Stdout, string(JSON(out)))
	return err
}

func printStatus(w io.Writer, st *coilyv1.StatusResponse) {
	c := st.GetCaller()
	PrintLine(w, "server:      coily %s, up since %s", st.GetVersion(), st.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	PrintLine(w, "you:         %s via %s (%s)", c.GetPrincipal(), c.GetTransport(), c.GetPeer())
	PrintLine(w, "roles:       %s", OrNone(c.GetRoles()))
	PrintLine(w, "permissions: %s", OrNone(c.GetPermissions()))
	PrintLine(w, "lockout:     %s", stopLine(st.GetLockout()))
	PrintLine(w, "pause:       %s", stopLine(st.GetPause()))
	for _, p := range st.GetSelfPauses() {
		PrintLine(w, "paused self: %s: %s", p.GetPrincipal(), stopLine(p))
	}
	PrintLine(w, "running:     %d", st.GetRunning())
	PrintLine(w, "policy:      %s (sha256 %.12s)", st.GetPolicyPath(), st.GetPolicySha256())
	boxes := st.GetSandboxes()
	line := OrNone(boxes)
	for _, b := range boxes {
		if b == "native" {
			line += "  (WARNING: native runs commands unsandboxed)"
		}
	}
	PrintLine(w, "sandboxes:   %s", line)
}

func stopLine(s *coilyv1.StopState) string {
	if !s.GetActive() {
		return "off"
	}
	line := fmt.Sprintf("ACTIVE since %s by %s", s.GetSince().AsTime().Local().Format(time.RFC3339), s.GetBy())
	if s.GetReason() != "" {
		line += fmt.Sprintf(" (%s)", s.GetReason())
	}
	return line
}

// OrNone joins v with commas, or says "none".
func OrNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

func itoa(n int) string { return fmt.Sprint(n) }
