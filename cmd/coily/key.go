package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/cli"
	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// keyCmd issues and rotates the descriptor signing keys of network-less
// sandboxes. A key goes only into the file named (0600); it is never
// printed.
func keyCmd(a *cli.App) *cobra.Command {
	return group("key", "sandbox signing keys: bootstrap, rotate",
		`Issue and rotate the keys network-less sandboxes sign their request files with. A key goes only
into the file named (mode 0600), never to the terminal.`,
		command(a, spec{use: "bootstrap --sandbox NAME [--out FILE]", short: "issue a sandbox's first key",
			flags: func(fs *pflag.FlagSet) runFunc {
				sandbox, out := keyFlags(fs)
				return func(ctx context.Context, e *env) int { return keyBootstrap(ctx, e, *sandbox, *out) }
			}}),
		command(a, spec{use: "rotate [--sandbox NAME [--out FILE]]", short: "replace one sandbox's key, or every sandbox's",
			flags: func(fs *pflag.FlagSet) runFunc {
				sandbox, out := keyFlags(fs)
				return func(ctx context.Context, e *env) int { return keyRotate(ctx, e, *sandbox, *out) }
			}}),
	)
}

func keyFlags(fs *pflag.FlagSet) (sandbox, out *string) {
	sandbox = stringFlag(fs, "sandbox", "COILY_KEY_SANDBOX", "", "the sandbox whose key to issue or rotate")
	out = stringFlag(fs, "out", "COILY_KEY_OUT", "", "file to write the key to, mode 0600 (default ./NAME.key)")
	return sandbox, out
}

// keyBootstrap issues a sandbox's first key.
func keyBootstrap(ctx context.Context, e *env, sandbox, out string) int {
	if sandbox == "" {
		return usage(e, "key bootstrap needs --sandbox NAME")
	}
	path, code, ok := keyTarget(e, sandbox, out)
	if !ok {
		return code
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: sandbox})
		if err != nil {
			return err
		}
		return saveKey(e, resp.GetKey(), sandbox, path)
	})
}

// keyRotate replaces one sandbox's key (written to a file like bootstrap)
// or every sandbox's (whose keys are not returned).
func keyRotate(ctx context.Context, e *env, sandbox, out string) int {
	if sandbox == "" && out != "" {
		return usage(e, "key rotate: --out needs --sandbox")
	}
	var path string
	if sandbox != "" {
		var code int
		var ok bool
		if path, code, ok = keyTarget(e, sandbox, out); !ok {
			return code
		}
	}
	return withClient(ctx, e, func(c *client.Client) error {
		resp, err := c.API.RotateKeys(ctx, &coilyv1.RotateKeysRequest{Sandbox: sandbox})
		if err != nil {
			return err
		}
		if sandbox != "" {
			return saveKey(e, resp.GetKey(), sandbox, path)
		}
		names := resp.GetSandboxes()
		if len(names) == 0 {
			fmt.Fprintln(e.stdout, "no sandbox has a key: nothing rotated")
			return nil
		}
		printLine(e.stdout, "rotated the keys of %d sandbox(es): %s", len(names), strings.Join(names, ", "))
		fmt.Fprintln(e.stdout, "their new keys were not returned; rotate each again to obtain its key: coily key rotate --sandbox NAME --out FILE")
		return nil
	})
}

// keyTarget checks the sandbox name and the file the key will go to
// before the key is asked for: a key issued but not written is lost
// (only a rotation replaces it).
func keyTarget(e *env, sandbox, out string) (string, int, bool) {
	if !policy.SandboxNamePattern.MatchString(sandbox) {
		printLine(e.stderr, "coily: sandbox name %q must match %s", sandbox, policy.SandboxNamePattern)
		return "", 2, false
	}
	if out == "" {
		out = sandbox + ".key" // the name's grammar keeps it in this directory
	}
	if err := folder.CheckKeyFileTarget(out); err != nil {
		printLine(e.stderr, "coily: %v", err)
		return "", 1, false
	}
	return out, 0, true
}

// saveKey writes a key the server returned and says where, never what.
func saveKey(e *env, k *coilyv1.SandboxKey, sandbox, path string) error {
	if k.GetSandbox() != sandbox {
		return fmt.Errorf("server returned the key of sandbox %q, not %q", k.GetSandbox(), sandbox)
	}
	kf := folder.KeyFile{Sandbox: k.GetSandbox(), Key: k.GetSecret(), Generation: int(k.GetGeneration())}
	if err := folder.WriteKeyFile(path, kf); err != nil {
		return fmt.Errorf("%w; the key was issued but not saved: run `coily key rotate --sandbox %s --out FILE` to get a new one", err, sandbox)
	}
	printLine(e.stdout, "key for sandbox %s (generation %d) written to %s", sandbox, kf.Generation, path)
	return nil
}
