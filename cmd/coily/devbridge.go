//go:build coilydev

package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"coily.dev/coily/bridge"
	"coily.dev/coily/client"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/client/tsnode"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
	"coily.dev/coily/store"
)

// devSandbox is the sandbox coily dev serves a folder for.
const devSandbox = "demo"

// runDevBridge gives the demo sandbox its key (DIR/demo.key, kept when it
// still matches the server's), then relays its requests from DIR/mount over
// the dev tailnet as tag:bridge until ctx ends.
func runDevBridge(ctx context.Context, log *slog.Logger, dir, socket string, db *store.DB) error {
	if err := devKey(ctx, log, dir, socket, db); err != nil {
		return fmt.Errorf("demo key: %w", err)
	}
	mount := filepath.Join(dir, "mount")
	if err := os.MkdirAll(mount, 0o700); err != nil {
		return err
	}
	c, err := tsnode.DialDev(ctx, dir, "bridge")
	if err != nil {
		return fmt.Errorf("bridge: join the dev tailnet: %w", err)
	}
	defer c.Close()
	return bridge.Run(ctx, bridge.Config{Mounts: []bridge.Mount{{Dir: mount, Sandbox: devSandbox}},
		Relayer: bridge.NewGRPCRelayer(c.API), Logger: log.With("component", "bridge")})
}

// devKey makes sure DIR/demo.key holds the demo sandbox's current key. A
// key file left by an earlier run that still matches the server's key is
// kept as it is, so a sandbox holding it keeps working across restarts;
// otherwise the key is issued, or rotated when the server has one, as the
// local operator, and written there.
func devKey(ctx context.Context, log *slog.Logger, dir, socket string, db *store.DB) error {
	path := filepath.Join(dir, devSandbox+".key")
	kept, why := demoKeyCurrent(path, db)
	if kept {
		log.Info("kept the demo sandbox's key", "file", path)
		return nil
	}
	log.Info("issuing the demo sandbox's key", "file", path, "why", why)
	c, err := client.DialLocal(socket)
	if err != nil {
		return err
	}
	defer c.Close()
	var key *coilyv1.SandboxKey
	issued, err := c.API.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: devSandbox})
	switch r := refusal.FromStatus(err); {
	case err == nil:
		key = issued.GetKey()
	case r.Code == refusal.BadRequest: // it has one: replace it
		rotated, err := c.API.RotateKeys(ctx, &coilyv1.RotateKeysRequest{Sandbox: devSandbox})
		if err != nil {
			return err
		}
		key = rotated.GetKey()
	default:
		return err
	}
	if key == nil {
		return errors.New("the server returned no key")
	}
	return folder.WriteKeyFile(path,
		folder.KeyFile{Sandbox: key.GetSandbox(), Key: key.GetSecret(), Generation: int(key.GetGeneration())})
}

// demoKeyCurrent says whether the key file at path holds the demo sandbox's
// current key in the store (same generation and secret), and if not, why.
func demoKeyCurrent(path string, db *store.DB) (bool, string) {
	file, err := folder.ReadKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, "no key file"
	}
	if err != nil {
		return false, err.Error() // never shows the key
	}
	stored, err := db.Key(devSandbox)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, "the server has no key for the sandbox"
	case err != nil:
		return false, err.Error()
	case file.Sandbox != devSandbox || file.Generation != stored.Generation ||
		subtle.ConstantTimeCompare(file.Key, stored.Secret) != 1:
		return false, "the key file does not hold the server's current key"
	}
	return true, ""
}
