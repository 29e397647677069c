package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/bridge"
	"coily.dev/coily/cli"
	"coily.dev/coily/policy"
)

func bridgeCmd(a *cli.App) *cobra.Command {
	return command(a, spec{use: "bridge --mount DIR[=SANDBOX]...",
		short: "relay request files from network-less sandboxes to the trust point",
		long: `Watch each shared folder's .coily/requests/ (a Cowork sandbox's folder on the owner's machine),
relay the HMAC-signed request files to the trust point over the tailnet (or the local socket), and
write the answers to .coily/responses/ (docs/protocol.md). With --witness-log, also keep a witness of
the trust point's audit log on this machine (docs/operations.md, "Witnesses").`,
		flags: func(fs *pflag.FlagSet) runFunc {
			mounts := listFlag(fs, "mount", "COILY_BRIDGE_MOUNTS",
				"shared folder to serve, DIR[=SANDBOX] (SANDBOX defaults to DIR's lower-cased base name); repeatable, comma-separated in the environment")
			rescan := durationFlag(fs, "rescan", "COILY_BRIDGE_RESCAN", bridge.DefaultRescan, "list each folder in full this often, whatever file-system events say")
			inFlight := intFlag(fs, "max-in-flight", "COILY_BRIDGE_MAX_IN_FLIGHT", bridge.DefaultMaxInFlight, "requests relayed at once per folder")
			wit := registerBridgeWitnessFlags(fs)
			return func(ctx context.Context, e *env) int { return runBridge(ctx, e, mounts.specs, *rescan, *inFlight, wit) }
		}})
}

func runBridge(ctx context.Context, e *env, mounts []string, rescan time.Duration, inFlight int, wf bridgeWitnessFlags) int {
	if len(mounts) == 0 {
		return usage(e, "bridge needs at least one --mount DIR[=SANDBOX]")
	}
	var ms []bridge.Mount
	for _, spec := range mounts {
		m, err := parseMount(spec)
		if err != nil {
			printLine(e.stderr, "coily bridge: --mount %q: %v", spec, err)
			return 2
		}
		ms = append(ms, m)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	wit, err := openBridgeWitness(log, wf)
	if err != nil {
		printLine(e.stderr, "coily bridge: %v", err)
		return 2
	}
	c, err := e.app.Dial(ctx)
	if err != nil {
		if wit != nil {
			_ = wit.w.Close()
		}
		return cli.Refusal(e.stderr, err, false)
	}
	defer c.Close()
	defer wit.run(ctx, log, c.API)()
	err = bridge.Run(ctx, bridge.Config{Mounts: ms, Relayer: bridge.NewGRPCRelayer(wit.relays(c.API)), Logger: log, Rescan: rescan, MaxInFlight: inFlight})
	if err != nil {
		printLine(e.stderr, "coily bridge: %v", err)
		return 1
	}
	log.Info("bridge stopped")
	return 0
}

// parseMount reads DIR[=SANDBOX]. The sandbox name is what follows the
// last '=' (sandbox names have none); without one, it is DIR's base name,
// lower-cased, when that is a valid sandbox name.
func parseMount(spec string) (bridge.Mount, error) {
	dir, sandbox := spec, ""
	if i := strings.LastIndexByte(spec, '='); i >= 0 {
		dir, sandbox = spec[:i], spec[i+1:]
		if !policy.SandboxNamePattern.MatchString(sandbox) {
			return bridge.Mount{}, fmt.Errorf("sandbox name %q must match %s", sandbox, policy.SandboxNamePattern)
		}
	}
	if dir == "" {
		return bridge.Mount{}, fmt.Errorf("no directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return bridge.Mount{}, err
	}
	if sandbox == "" {
		sandbox = strings.ToLower(filepath.Base(abs))
		if !policy.SandboxNamePattern.MatchString(sandbox) {
			return bridge.Mount{}, fmt.Errorf("%q is not a sandbox name (%s): give one, DIR=SANDBOX", sandbox, policy.SandboxNamePattern)
		}
	}
	return bridge.Mount{Dir: abs, Sandbox: sandbox}, nil
}
