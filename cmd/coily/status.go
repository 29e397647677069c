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
			fmt.Fprintln(e.stdout, string(termJSON(out)))
		}
		return err
	})
}

func printStatus(w io.Writer, st *coilyv1.StatusResponse) {
	c := st.GetCaller()
	printLine(w, "server:      coily %s, up since %s", st.GetVersion(), st.GetStartedAt().AsTime().Local().Format(time.RFC3339))
	printLine(w, "you:         %s via %s (%s)", c.GetPrincipal(), c.GetTransport(), c.GetPeer())
	printLine(w, "roles:       %s", orNone(c.GetRoles()))
	printLine(w, "permissions: %s", orNone(c.GetPermissions()))
	printLine(w, "lockout:     %s", stopLine(st.GetLockout()))
	printLine(w, "pause:       %s", stopLine(st.GetPause()))
	printLine(w, "running:     %d", st.GetRunning())
	printLine(w, "policy:      %s (sha256 %.12s)", st.GetPolicyPath(), st.GetPolicySha256())
	boxes := st.GetSandboxes()
	line := orNone(boxes)
	for _, b := range boxes {
		if b == "native" {
			line += "  (WARNING: native runs commands unsandboxed)"
		}
	}
	printLine(w, "sandboxes:   %s", line)
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
