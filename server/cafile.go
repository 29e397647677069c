package server

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// maxCAFile bounds a rule's ca_file (a system bundle is about 200 KiB).
const maxCAFile = 4 << 20

// openCAFile opens the rule's ca_file for the sandbox to bind by
// descriptor, or returns nil when the rule has none. The open file must
// be a regular file of PEM certificates and nothing else: whatever the
// path leads to now (a link put in its place, a key), the sandbox sees
// only certificates.
func openCAFile(r *policy.Rule) (*os.File, error) {
	if r.CAFile == "" {
		return nil, nil
	}
	f, err := os.Open(r.CAFile)
	if err != nil {
		return nil, caRefusal(r, err)
	}
	if err := checkCAFile(f); err != nil {
		f.Close()
		return nil, caRefusal(r, err)
	}
	return f, nil
}

func caRefusal(r *policy.Rule, err error) error {
	return refusal.Wrap(refusal.SandboxUnavailable, err, "ca_file %s of rule %q: %v", r.CAFile, r.Name, err)
}

// checkCAFile reads the open file: regular, at most maxCAFile bytes, one
// or more CERTIFICATE blocks and only whitespace or comment text between
// them (no other PEM block).
func checkCAFile(f *os.File) error {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	case fi.Size() > maxCAFile:
		return fmt.Errorf("larger than %d bytes", maxCAFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err != nil {
		return err
	}
	if len(data) > maxCAFile {
		return fmt.Errorf("larger than %d bytes", maxCAFile)
	}
	certs := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if bytes.Contains(rest, []byte("-----BEGIN")) {
				return errors.New("holds a malformed PEM block")
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a PEM block of type %q; only certificates are allowed", b.Type)
		}
		certs++
	}
	if certs == 0 {
		return errors.New("holds no PEM certificate")
	}
	return nil
}
