package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"

	"coily.dev/coily/keystore/credref"
)

// MaxFileSize bounds a credentials file.
const MaxFileSize = 1 << 20

// File reads "name=value" lines from a credentials file for development
// and `coily dev`. A reference's Path is the name. The file is re-read on
// every Fetch (the Keystore caches); see ParseFile for the format.
//
// The file must be a regular file (not a symbolic link: it is opened with
// O_NOFOLLOW), owned by the server's user or root, granting no
// permission to group or others; otherwise every fetch is refused with
// ErrDenied.
type File struct{ Path string }

// NewFile returns the backend over the credentials file at path.
func NewFile(path string) *File { return &File{Path: path} }

// Fetch returns the value of the line named ref.Path.
func (f *File) Fetch(ctx context.Context, ref Ref) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: %w", ErrUnreachable, err)}
	}
	values, err := f.read()
	if err != nil {
		return "", &Error{Ref: ref, Err: err}
	}
	v, ok := values[ref.Path]
	if !ok {
		return "", &Error{Ref: ref, Err: fmt.Errorf("%w: credentials file %s has no line %q", ErrNotFound, f.Path, ref.Path+"=")}
	}
	return v, nil
}

// Check reports whether the file is there, safe (owner, mode, no link)
// and parses; its values are read and dropped.
func (f *File) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	values, err := f.read()
	clear(values)
	return err
}

// read opens, checks and parses the file.
func (f *File) read() (map[string]string, error) {
	if f.Path == "" {
		return nil, fmt.Errorf("%w: no credentials file configured", ErrNotFound)
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer (the fstat
	// below then refuses it); reads of a regular file ignore it.
	fd, err := os.OpenFile(f.Path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%w: credentials file %s does not exist", ErrNotFound, f.Path)
		case errors.Is(err, syscall.ELOOP):
			return nil, fmt.Errorf("%w: credentials file %s is a symbolic link; point --credentials-file at the file itself", ErrDenied, f.Path)
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("%w: cannot open credentials file %s", ErrDenied, f.Path)
		default:
			return nil, fmt.Errorf("%w: cannot open credentials file %s: %v", ErrUnreachable, f.Path, cause(err))
		}
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: cannot stat credentials file %s: %v", ErrUnreachable, f.Path, cause(err))
	}
	if err := checkFileInfo(f.Path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(fd, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read credentials file %s: %v", ErrUnreachable, f.Path, cause(err))
	}
	defer clear(data) // best effort: the parsed values are copies (see the package doc)
	values, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("%w: credentials file %s: %w", ErrUnreachable, f.Path, err)
	}
	return values, nil
}

// checkFileInfo refuses a file that is not regular, that group or others
// may access, or that someone other than this user or root owns.
func checkFileInfo(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: credentials file %s is not a regular file", ErrDenied, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: credentials file %s has mode %04o, open to group or others: chmod 600 %s", ErrDenied, path, fi.Mode().Perm(), path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: cannot tell who owns credentials file %s", ErrDenied, path)
	}
	if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
		return fmt.Errorf("%w: credentials file %s is owned by uid %d, neither this server's user (uid %d) nor root", ErrDenied, path, uid, os.Geteuid())
	}
	if fi.Size() > MaxFileSize {
		return fmt.Errorf("%w: credentials file %s is larger than %d bytes", ErrDenied, path, MaxFileSize)
	}
	return nil
}

// A ParseError is a malformed credentials file: the line (1-based; 0 for
// the file as a whole) and what is wrong with it, never the line's text,
// which may hold a secret.
type ParseError struct {
	Line   int
	Reason string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return e.Reason
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// Reasons of a ParseError (fixed texts: nothing of the input).
const (
	reasonTooLarge  = "file larger than 1 MiB"
	reasonUTF8      = "not valid UTF-8"
	reasonNUL       = "contains a NUL byte"
	reasonNoEquals  = "not a comment and no '=' (want name=value)"
	reasonEmptyName = "empty name (want name=value)"
	reasonBadName   = "bad name (want [A-Za-z0-9._-]+ before the '=', no spaces)"
	reasonEmptyVal  = "empty value"
	reasonControl   = "control character in the value (a stray carriage return?)"
	reasonDuplicate = "name already set on an earlier line"
)

// ParseFile parses a credentials file:
//
//	# a comment
//	github=ghp_...
//	npm-token=npm_...
//
// Lines are UTF-8 "name=value": the name is [A-Za-z0-9._-]+, the value
// everything after the first '=' to the end of the line (a trailing "\r"
// removed; no quoting, no trimming). Blank lines and lines whose first
// non-blank character is '#' are ignored; a leading byte order mark is
// skipped. Refused, with the line number only: a line without '=', a bad
// or duplicate name, an empty value, a value with a control character
// other than tab, a NUL byte, invalid UTF-8, more than MaxFileSize bytes.
func ParseFile(data []byte) (map[string]string, error) {
	if len(data) > MaxFileSize {
		return nil, &ParseError{Reason: reasonTooLarge}
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	values := map[string]string{}
	fail := func(line int, reason string) (map[string]string, error) {
		clear(values)
		return nil, &ParseError{Line: line, Reason: reason}
	}
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case bytes.IndexByte(line, 0) >= 0:
			return fail(n, reasonNUL)
		case !utf8.Valid(line):
			return fail(n, reasonUTF8)
		}
		if t := bytes.TrimLeft(line, " \t"); len(t) == 0 || t[0] == '#' {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte("="))
		switch {
		case !ok:
			return fail(n, reasonNoEquals)
		case len(name) == 0:
			return fail(n, reasonEmptyName)
		case !credref.ValidName(name):
			return fail(n, reasonBadName)
		case len(value) == 0:
			return fail(n, reasonEmptyVal)
		case bytes.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			return fail(n, reasonControl)
		}
		if _, dup := values[string(name)]; dup {
			return fail(n, reasonDuplicate)
		}
		values[string(name)] = string(value)
	}
	return values, nil
}

// cause is err without the *fs.PathError's operation and path (the
// messages here name the path themselves).
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
