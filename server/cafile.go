package server

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"coily.dev/coily/policy"
	"coily.dev/coily/refusal"
)

// maxCAFile bounds a rule's ca_file (a system bundle is about 200 KiB).
const maxCAFile = 4 << 20

// copyCAFile reads the rule's ca_file, checks it, and returns a private
// copy of what was checked, open, for the sandbox to bind by descriptor;
// nil when the rule has none. The file read must be a regular file of PEM
// certificates and nothing else: whatever the path leads to now (a link
// put in its place, a key), the sandbox sees only certificates, exactly
// those checked. The copy, in the scratch directory, is readable by
// anyone (it holds certificates only), so that the sandbox's user — for a
// root server an unprivileged one — reads it whoever owns the original;
// the caller removes it (its name is the file's Name).
func copyCAFile(r *policy.Rule, scratch string) (*os.File, error) {
	if r.CAFile == "" {
		return nil, nil
	}
	f, err := openCAFile(r.CAFile)
	if err != nil {
		return nil, caRefusal(r, err)
	}
	defer f.Close()
	data, err := checkCAFile(f)
	if err != nil {
		return nil, caRefusal(r, err)
	}
	cp, err := writeCACopy(scratch, data)
	if err != nil {
		return nil, refusal.Wrap(refusal.Internal, err, "could not copy the ca_file of rule %q", r.Name)
	}
	return cp, nil
}

// writeCACopy writes data to a new read-only file in dir and returns it
// open for reading.
func writeCACopy(dir string, data []byte) (*os.File, error) {
	f, err := os.CreateTemp(dir, scratchPrefix+"ca-")
	if err != nil {
		return nil, err
	}
	name := f.Name()
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(0o444), f.Close())
	if err == nil {
		f, err = os.Open(name)
	}
	if err != nil {
		os.Remove(name)
		return nil, err
	}
	return f, nil
}

// openCAFile opens a ca_file for reading without blocking on it: it may
// lie in a workspace, where a command can put a FIFO in its place
// (checkCAFile then refuses anything but a regular file).
func openCAFile(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func caRefusal(r *policy.Rule, err error) error {
	return refusal.Wrap(refusal.SandboxUnavailable, err, "ca_file %s of rule %q: %v", r.CAFile, r.Name, err)
}

// checkCAFile reads the open file and returns its content: regular, at
// most maxCAFile bytes, one or more CERTIFICATE blocks and only whitespace
// or comment text between them (no other PEM block).
func checkCAFile(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > maxCAFile:
		return nil, fmt.Errorf("larger than %d bytes", maxCAFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxCAFile {
		return nil, fmt.Errorf("larger than %d bytes", maxCAFile)
	}
	return data, checkPEMCertificates(data)
}

// checkPEMCertificates accepts one or more CERTIFICATE blocks and nothing
// else but text between them.
func checkPEMCertificates(data []byte) error {
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
