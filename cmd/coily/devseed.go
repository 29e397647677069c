//go:build coilydev

package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"coily.dev/coily/atomicfile"
	"coily.dev/coily/examples"
)

// seedDevFiles writes the demo policy (when policyPath is empty: it is
// then DIR/policy.yaml) and DIR/credentials, each only when it is absent
// or reset is set, and says on w which it did. A restart keeps what the
// user edited. It returns the policy's and the credentials' paths.
func seedDevFiles(w io.Writer, dir, policyPath string, reset bool) (string, string, error) {
	if policyPath == "" {
		policyPath = filepath.Join(dir, "policy.yaml")
		did, err := seedDevFile(policyPath, examples.DevPolicy, reset)
		if err != nil {
			return "", "", fmt.Errorf("dev policy: %w", err)
		}
		printLine(w, "coily dev: policy %s: %s", policyPath, did)
	}
	credFile := filepath.Join(dir, "credentials")
	// A fresh demo secret ("demo"), which the dev policy injects into
	// /usr/bin/env as COILY_DEMO_TOKEN.
	creds := "# coily dev's file keystore: name=value lines, mode 0600.\ndemo=coily-demo-" + rand.Text() + "\n"
	did, err := seedDevFile(credFile, []byte(creds), reset)
	if err != nil {
		return "", "", fmt.Errorf("dev credentials: %w", err)
	}
	printLine(w, "coily dev: credentials %s: %s", credFile, did)
	return policyPath, credFile, nil
}

// seedDevFile writes data to path when nothing is there, or, with reset,
// after moving what is there to path.old. It says which it did.
func seedDevFile(path string, data []byte, reset bool) (string, error) {
	_, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "the demo one, written", atomicfile.Write(path, data, 0o600)
	case err != nil:
		return "", err
	case !reset:
		return "kept (yours; `coily dev --reset` writes the demo one again)", nil
	}
	if err := os.Rename(path, path+".old"); err != nil {
		return "", err
	}
	return "replaced by the demo one (--reset); the one it replaced is " + path + ".old", atomicfile.Write(path, data, 0o600)
}
