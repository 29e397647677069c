//go:build coilydev

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"tailscale.com/types/logger"

	"coily.dev/coily/atomicfile"
	"coily.dev/coily/cli"
	"coily.dev/coily/client/tsnode"
	"coily.dev/coily/internal/devnet"
	"coily.dev/coily/keystore"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/store"
)

const devBanner = `
  ┌──────────────────────────────────────────────────────────────────────┐
  │ coily dev: a private tailnet and a trust point on this machine.      │
  │ NOT FOR PRODUCTION: any local process can join this tailnet with any │
  │ tag, and the demo credential lives in a plain file.                  │
  └──────────────────────────────────────────────────────────────────────┘
`

// addDevCommand registers `coily dev` and the --dev transport (this build
// has them: -tags coilydev).
func addDevCommand(a *cli.App, root *cobra.Command) {
	root.AddCommand(command(a, spec{use: "dev", short: "run a private tailnet and the trust point on this machine (NOT for production)",
		long: `Start, offline on 127.0.0.1, a private tailnet (Tailscale's test control server and a DERP relay),
the trust point on it with the demo policy (examples/dev.yaml) and the local operator socket, and a
bridge for the sandbox "demo"; write DIR/env once it serves; run until interrupted. The demo policy
(DIR/policy.yaml) and credentials (DIR/credentials) are written when absent; a restart keeps the ones
there, edited or not, and --reset writes them again (the old ones kept as NAME.old). Any local process
may join this tailnet with any tag: it is for trying coily out, never for production.`,
		flags: func(fs *pflag.FlagSet) runFunc {
			policyPath := stringFlag(fs, "policy", "COILY_POLICY", "", "policy file (default: the embedded examples/dev.yaml)")
			sbUser := sandboxUserFlag(fs)
			consoleListen := stringFlag(fs, "console-listen", "COILY_DEV_CONSOLE_LISTEN", "127.0.0.1:0", "loopback address of the web console's dev gateway (acts as the dev owner: dev only)")
			reset := fs.Bool("reset", false, "write the demo policy and credentials again, moving the ones there to NAME.old (without it, a restart keeps them)")
			return func(ctx context.Context, e *env) int {
				return runDev(ctx, e, *policyPath, *sbUser, *consoleListen, *reset)
			}
		}}))
}

// runDev starts, offline on loopback, a private tailnet, the trust point on
// it and on the local socket, writes DIR/env once it serves, and runs until
// interrupted. It holds DIR's lock from before it changes anything there.
func runDev(ctx context.Context, e *env, policyPath, sbUser, consoleListen string, reset bool) int {
	runAs, err := sandboxUser(sbUser)
	if err != nil {
		return usage(e, "dev: %v", err)
	}
	dir, err := devStateDir(e)
	if err != nil {
		printLine(e.stderr, "coily dev: %v", err)
		return 1
	}
	lock, code := takeStateDir(e, "coily dev", dir)
	if lock == nil {
		return code
	}
	defer lock.Close()
	fmt.Fprint(e.stderr, devBanner)
	if err := dev(ctx, e, dir, policyPath, consoleListen, reset, runAs); err != nil {
		printLine(e.stderr, "coily dev: %v", err)
		return 1
	}
	return 0
}

func dev(ctx context.Context, e *env, dir, policyPath, consoleListen string, reset bool, runAs sandbox.User) error {
	if err := prepareStateDir(dir, ""); err != nil {
		return err
	}
	removeReadyFiles := func() {
		for _, f := range []string{"env", tsnode.DevInfoFile} {
			os.Remove(filepath.Join(dir, f))
		}
	}
	removeReadyFiles() // stale files of an earlier run
	defer removeReadyFiles()
	policyPath, credFile, err := seedDevFiles(e.stderr, dir, policyPath, reset)
	if err != nil {
		return err
	}
	log := newLogger(e, "text")
	var tsLog logger.Logf = logger.Discard
	if e.global.Verbose {
		tsLog = func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...)) }
	}
	net, err := devnet.Start(tsLog)
	if err != nil {
		return err
	}
	defer net.Close()
	node, err := devnet.Join(ctx, net.ControlURL, devnet.NodeOptions{Dir: filepath.Join(dir, "tsnet"),
		Hostname: "coily", Tags: []string{"tag:coily"}, Logf: tsLog})
	if err != nil {
		return err
	}
	dc, err := listenDevConsole(ctx, net.ControlURL, dir, consoleListen, tsLog)
	if err != nil {
		return err
	}
	defer dc.close()
	socket := filepath.Join(dir, "coily.sock")
	var bridged sync.WaitGroup
	defer bridged.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the bridge when the server stops
	return serve(ctx, log, serveOptions{policyPath: policyPath, stateDir: dir, socket: socket, node: node,
		keystore: keystoreConfig{file: credFile, cache: keystore.DefaultCacheTTL}, sandboxUser: runAs,
		web: true, webDev: true,
		webHTTP: true, // the dev tailnet names certificate domains but cannot issue certificates
		webReady: func(consoleURL string) {
			if err := dc.start(ctx, log, consoleURL); err != nil {
				log.Error("the dev console gateway could not start", "err", err)
				dc.ln.Close() // refuse connections rather than hold them
			}
		},
		ready: func(tailAddr string, db *store.DB) {
			info := tsnode.DevInfo{ControlURL: net.ControlURL, Server: tailAddr, Socket: socket}
			if err := writeDevFiles(dir, info, dc.url()); err != nil {
				log.Error("could not write the dev files", "err", err)
				return
			}
			bridged.Add(1)
			go func() {
				defer bridged.Done()
				if err := runDevBridge(ctx, log, dir, socket, db); err != nil && ctx.Err() == nil {
					log.Error("the demo bridge stopped", "err", err)
				}
			}()
			printDevHelp(e.stdout, dir, policyPath, dc.url())
		}})
}

// writeDevFiles writes DIR/dev.json (for clients) and then DIR/env, whose
// existence tells scripts the server is ready.
func writeDevFiles(dir string, info tsnode.DevInfo, consoleURL string) error {
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, tsnode.DevInfoFile), data, 0o600); err != nil {
		return err
	}
	env := fmt.Sprintf("# coily dev: source this file, then run coily commands.\nexport COILY_DEV=%s\nexport COILY_DEV_AS=owner\n"+
		"# The web console, acting as the dev owner (dev only):\nexport COILY_DEV_CONSOLE=%s\n", shellQuote(dir), shellQuote(consoleURL))
	return atomicfile.Write(filepath.Join(dir, "env"), []byte(env), 0o600)
}

func printDevHelp(w io.Writer, dir, policyPath, consoleURL string) {
	fmt.Fprintf(w, `coily dev is serving (state in %[1]s, policy %[2]s).
Web console (DEV ONLY: it acts as the dev owner for anyone on this machine): %[3]s

In another shell:
  . %[1]s/env                                   # COILY_DEV=%[1]s
  coily exec -- /bin/echo hi                     # as tag:owner over the dev tailnet
  coily exec -- /usr/bin/env                     # COILY_DEMO_TOKEN is injected, and redacted
  SANDBOX_RUNTIME=1 COILY_MOUNT=%[1]s/mount COILY_KEY_FILE=%[1]s/demo.key \
    coily exec -- /bin/echo hi                   # as the demo sandbox: files, bridge, tailnet
  coily status                                   # shows who you are to the server
  COILY_DEV_AS=agent coily unlock                # refused: agents may not unlock
  COILY_DEV_AS=stranger coily exec -- /bin/echo  # refused: no grant
  coily --socket %[1]s/coily.sock status          # the local operator socket
  COILY_DEV_AS=agent coily exec -- /bin/echo confirm hi  # waits: approve it in the console
Stop with Ctrl-C.
`, dir, policyPath, consoleURL)
}
