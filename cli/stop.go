package cli

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// The stop controls: lockout (the nuclear stop), unlock, pause (the soft
// one) and resume. Each takes --reason, recorded in the state and the
// audit log.

func (a *App) lockoutCmd() *cobra.Command {
	return a.stopCmd("lockout", "nuclear stop: kill running commands, refuse everything until unlock",
		`Kill every running command (SIGTERM, then SIGKILL), reject pending approvals, rotate the
sandboxes' signing keys, and refuse everything after with lockout-active, across restarts, until
a human unlocks on the host (coily unlock, through the local socket: tailscale ssh HOST coily unlock).`,
		func(ctx context.Context, c *client.Client, reason string) (proto.Message, string, error) {
			resp, err := c.API.Lockout(ctx, &coilyv1.LockoutRequest{Reason: reason})
			if err != nil {
				return nil, "", err
			}
			return resp, "locked out by " + resp.GetLockout().GetBy() + "; " + itoa(int(resp.GetKilled())) +
				" running command(s) signalled. `coily unlock` on the host lifts it.", nil
		})
}

func (a *App) unlockCmd() *cobra.Command {
	return a.stopCmd("unlock", "lift a lockout (the local operator only, by default)",
		`Lift a lockout. By default only the local operator may: run it on the host (the local
socket), e.g. over tailscale ssh, whose check mode asks for a fresh login.`,
		func(ctx context.Context, c *client.Client, reason string) (proto.Message, string, error) {
			resp, err := c.API.Unlock(ctx, &coilyv1.UnlockRequest{Reason: reason})
			if err != nil {
				return nil, "", err
			}
			return resp, "unlocked by " + resp.GetLockout().GetBy(), nil
		})
}

func (a *App) pauseCmd() *cobra.Command {
	return a.stopCmd("pause", "soft stop: refuse new commands, let running ones finish",
		`Refuse new commands with pause-active; running ones finish. A caller with the pause
permission pauses the server; any other caller allowed to exec pauses itself: its own new
commands are refused, everyone else's run. Resuming needs an owner's role, and lifts both.`,
		func(ctx context.Context, c *client.Client, reason string) (proto.Message, string, error) {
			resp, err := c.API.Pause(ctx, &coilyv1.PauseRequest{Reason: reason})
			if err != nil {
				return nil, "", err
			}
			if who := resp.GetPause().GetPrincipal(); who != "" {
				return resp, who + " paused itself (only its own new commands are refused); " + itoa(int(resp.GetRunning())) +
					" of its command(s) still running will finish", nil
			}
			return resp, "paused by " + resp.GetPause().GetBy() + "; " + itoa(int(resp.GetRunning())) +
				" command(s) still running will finish", nil
		})
}

func (a *App) resumeCmd() *cobra.Command {
	return a.stopCmd("resume", "lift a pause", "Lift a pause, and every caller's pause of itself: new commands are accepted again.",
		func(ctx context.Context, c *client.Client, reason string) (proto.Message, string, error) {
			resp, err := c.API.Resume(ctx, &coilyv1.ResumeRequest{Reason: reason})
			if err != nil {
				return nil, "", err
			}
			return resp, "resumed by " + resp.GetPause().GetBy(), nil
		})
}

// reasonWords says why a stop control takes words after its flags: over
// ssh (`tailscale ssh HOST coily lockout --reason "agent misbehaving"`)
// the remote shell splits the quoted reason into words, and an emergency
// brake must not fail on quoting (TestHeadscaleTailscaleSSHLockout).
const reasonWords = "Words after the flags are part of the reason: over ssh (tailscale ssh HOST coily lockout\n" +
	"--reason \"agent misbehaving\") the remote shell splits a quoted reason, which still means one reason."

// stopCmd builds one stop control: call returns the answer and the line
// that says it.
func (a *App) stopCmd(name, short, long string, call func(context.Context, *client.Client, string) (proto.Message, string, error)) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   name + " [--reason TEXT [WORD...]]",
		Short: short,
		Long:  long + "\n\n" + reasonWords,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, words []string) error {
			ctx := cmd.Context()
			// Joined, never trimmed: a reason given whole reaches the
			// server exactly (the audit and status show what was sent).
			why := strings.Join(slices.DeleteFunc(append([]string{reason}, words...), func(w string) bool { return w == "" }), " ")
			return a.withClient(ctx, asJSON, func(c *client.Client) error {
				resp, line, err := call(ctx, c, why)
				if err != nil {
					return err
				}
				if asJSON {
					return a.printProto(resp)
				}
				PrintLine(a.Stdout, "%s", line)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the state and the audit log)")
	Twin(cmd.Flags(), "reason", "COILY_REASON")
	jsonFlag(cmd, &asJSON, "the server's answer")
	return cmd
}
