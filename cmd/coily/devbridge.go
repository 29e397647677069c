package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"coily.dev/coily/bridge"
	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// devSandbox is the sandbox coily dev serves a folder for.
const devSandbox = "demo"

// runDevBridge gives the demo sandbox a fresh key (DIR/demo.key), then
// relays its requests from DIR/mount over the dev tailnet as tag:bridge
// until ctx ends.
func runDevBridge(ctx context.Context, log *slog.Logger, dir, socket string) error {
	if err := devKey(ctx, dir, socket); err != nil {
		return fmt.Errorf("demo key: %w", err)
	}
	mount := filepath.Join(dir, "mount")
	if err := os.MkdirAll(mount, 0o700); err != nil {
		return err
	}
	c, err := client.DialDev(ctx, dir, "bridge")
	if err != nil {
		return fmt.Errorf("bridge: join the dev tailnet: %w", err)
	}
	defer c.Close()
	return bridge.Run(ctx, bridge.Config{Mounts: []bridge.Mount{{Dir: mount, Sandbox: devSandbox}},
		Relayer: c.Relayer(), Logger: log.With("component", "bridge")})
}

// devKey issues the demo sandbox's key, or rotates it when the state dir
// already had one, as the local operator, and writes it to DIR/demo.key.
func devKey(ctx context.Context, dir, socket string) error {
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
	return client.WriteKeyFile(filepath.Join(dir, devSandbox+".key"),
		client.KeyFile{Sandbox: key.GetSandbox(), Key: key.GetSecret(), Generation: int(key.GetGeneration())})
}
