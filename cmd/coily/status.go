package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

func runStatus(ctx context.Context, e *env) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := boolFlag(fs, "json", "COILY_JSON", "print the status as JSON")
	if code, ok := parseFlags(fs, e); !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		st, err := c.API.Status(ctx, &coilyv1.StatusRequest{})
		if err != nil {
			return err
		}
		if !*asJSON {
			printStatus(e.stdout, st)
			return nil
		}
		out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
		if err == nil {
			fmt.Fprintln(e.stdout, string(out))
		}
		return err
	})
}

func printStatus(w io.Writer, st *coilyv1.StatusResponse) {
	c := st.GetCaller()
	fmt.Fprintf(w, "server:      coily %s, up since %s\n", st.GetVersion(), st.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	fmt.Fprintf(w, "you:         %s via %s (%s)\n", c.GetPrincipal(), c.GetTransport(), c.GetPeer())
	fmt.Fprintf(w, "roles:       %s\n", orNone(c.GetRoles()))
	fmt.Fprintf(w, "permissions: %s\n", orNone(c.GetPermissions()))
	fmt.Fprintf(w, "lockout:     %s\n", stopLine(st.GetLockout()))
	fmt.Fprintf(w, "pause:       %s\n", stopLine(st.GetPause()))
	fmt.Fprintf(w, "running:     %d\n", st.GetRunning())
	fmt.Fprintf(w, "policy:      %s (sha256 %.12s)\n", st.GetPolicyPath(), st.GetPolicySha256())
	boxes := st.GetSandboxes()
	line := orNone(boxes)
	for _, b := range boxes {
		if b == "native" {
			line += "  (WARNING: native runs commands unsandboxed)"
		}
	}
	fmt.Fprintf(w, "sandboxes:   %s\n", line)
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

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}
