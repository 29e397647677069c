// Package cabundle is the attachment of a rule's ca_file: the owner's
// PEM bundle the command trusts instead of the system's roots. It checks
// the file (a regular file of certificates and nothing else), copies what
// it checked into the scratch directory, binds the copy at sandbox.CAPath
// and points the TLS clients' variables (sandbox.CAEnv) at it.
package cabundle

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"

	"coily.dev/coily/attach"
	"coily.dev/coily/audit"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

// MaxSize bounds a ca_file (a system bundle is about 200 KiB).
const MaxSize = 4 << 20

// Bundle is the ca_file of one rule, for one execution.
type Bundle struct {
	rule, path string
	copy       *os.File
	closed     bool
}

// New is the attachment of rule's ca_file path; nil when it names none.
func New(rule, path string) *Bundle {
	if path == "" {
		return nil
	}
	return &Bundle{rule: rule, path: path}
}

var _ attach.Attachment = (*Bundle)(nil)

// Prepare copies the ca_file, checked, for the sandbox to bind by
// descriptor, and sets the CA variables. The file read must be a regular
// file of PEM certificates and nothing else: whatever the path leads to
// now (a link put in its place, a key), the sandbox sees only
// certificates, exactly those checked. The copy is readable by anyone (it
// holds certificates only), so that the sandbox's user — for a root
// server an unprivileged one — reads it whoever owns the original.
//
// When the egress proxy inspects TLS it has bound its own bundle there
// already, which holds the ca_file's certificates and its CA: Prepare
// then leaves it be.
func (b *Bundle) Prepare(_ context.Context, run *attach.Run) error {
	if slices.ContainsFunc(run.Binds, func(x sandbox.Bind) bool { return x.At == sandbox.CAPath }) {
		return nil
	}
	data, err := Read(b.path)
	if err != nil {
		return refusal.Wrap(refusal.SandboxUnavailable, err, "ca_file %s of rule %q: %v", b.path, b.rule, err)
	}
	cp, err := WriteCopy(run.Scratch, run.ScratchPrefix+"ca-", data)
	if err != nil {
		return refusal.Wrap(refusal.Internal, err, "could not copy the ca_file of rule %q", b.rule)
	}
	b.copy = cp
	run.Bind(sandbox.Bind{At: sandbox.CAPath, File: cp})
	for _, k := range sandbox.CAEnv {
		run.SetEnv(k, sandbox.CAPath)
	}
	return nil
}

// Close removes the copy.
func (b *Bundle) Close(context.Context, *attach.End) {
	if b.closed {
		return
	}
	b.closed = true
	if b.copy != nil {
		b.copy.Close()
		os.Remove(b.copy.Name())
	}
}

// Describe adds nothing: the rule's name is the record's.
func (b *Bundle) Describe(*audit.Record) {}

// Read reads the file at path and returns its content, checked as the
// command's bundle is: regular, at most MaxSize bytes, one or more
// CERTIFICATE blocks and only whitespace or comment text between them.
// It never blocks on what the path leads to: the file may lie in a
// workspace, where a command can put a FIFO in its place.
func Read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return check(f)
}

// Pool reads the bundle at path as Read does and returns its
// certificates as a pool, for a client of the server's own that trusts
// the owner's ca_file (a GitHub App's API).
func Pool(path string) (*x509.CertPool, error) {
	data, err := Read(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("holds no usable certificate")
	}
	return pool, nil
}

// WriteCopy writes data to a new read-only file in dir, its name
// starting with prefix, and returns it open for reading (the sandbox binds
// it by descriptor): the rule's CA bundle, and the egress proxy's bundle
// with an exec's inspection CA.
func WriteCopy(dir, prefix string, data []byte) (*os.File, error) {
	f, err := os.CreateTemp(dir, prefix)
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

// check reads the open file and returns its content (see Read).
func check(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > MaxSize:
		return nil, fmt.Errorf("larger than %d bytes", MaxSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxSize)
	}
	return data, CheckPEM(data)
}

// CheckPEM accepts one or more CERTIFICATE blocks and nothing else but
// text between them.
func CheckPEM(data []byte) error {
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
