package keystore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/vault/api"
)

// tokenFileCheck is how often, at most, the token file is looked at.
const tokenFileCheck = time.Second

// maxTokenFile bounds a token file (or a wrapped secret id file).
const maxTokenFile = 64 << 10

// tokenFile follows the file a token-auth server reads its token from:
// Vault Agent's file sink replaces it (by rename) with each new token.
type tokenFile struct {
	path string

	mu      sync.Mutex
	checked time.Time   // last look
	fi      os.FileInfo // the file the token in use was read from
	warned  bool        // an unreadable file was logged
	// unread: the last read failed (a file caught empty or half written
	// by its writer, say). The file is then read at each check whether it
	// looks changed or not: a rewrite in place may keep the inode, size
	// and modification time of the file last read.
	unread bool
}

// changed reports whether fi is another file, or the same file written
// since, than the one the token in use came from: device and inode,
// modification time and size.
func (tf *tokenFile) changed(fi os.FileInfo) bool {
	return !os.SameFile(tf.fi, fi) || !tf.fi.ModTime().Equal(fi.ModTime()) || tf.fi.Size() != fi.Size()
}

// readTokenFile reads a token (or wrapping token) file: one token, with
// surrounding white space. It does not follow a FIFO's promise of data.
func readTokenFile(path string) (string, os.FileInfo, error) {
	return readSecretFile("the token file", path)
}

// readSecretFile is readTokenFile for any file holding one secret value,
// what naming it in errors ("the secret id file").
func readSecretFile(what, path string) (string, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("reading %s %s: %w", what, path, cause(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("reading %s %s: %w", what, path, cause(err))
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s %s is not a regular file", what, path)
	}
	if err := checkSecretFileInfo(what, path, fi); err != nil {
		return "", nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", nil, fmt.Errorf("reading %s %s: %w", what, path, cause(err))
	}
	defer clear(b) // best effort: the token returned is a copy (see the package doc)
	if len(b) > maxTokenFile {
		return "", nil, fmt.Errorf("%s %s is larger than %d bytes", what, path, maxTokenFile)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", nil, fmt.Errorf("%s %s does not hold one value", what, path)
	}
	return tok, fi, nil
}

// checkSecretFileInfo refuses a file holding a secret (what names it)
// that others may read or write, its group may write, or someone other
// than this server's user or root owns.
func checkSecretFileInfo(what, path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot tell who owns %s %s", what, path)
	}
	return fileAccess(what, path, fi.Mode().Perm(), int(st.Uid), os.Geteuid())
}

// tokenFileAccess is checkTokenFileInfo's rule for a file of mode perm
// owned by owner, read by a server running as self. Group-readable is
// allowed: Vault Agent's sinks are often 0640 for a group the server is
// in.
func tokenFileAccess(path string, perm os.FileMode, owner, self int) error {
	return fileAccess("the token file", path, perm, owner, self)
}

func fileAccess(what, path string, perm os.FileMode, owner, self int) error {
	switch {
	case perm&0o006 != 0:
		return fmt.Errorf("%s %s has mode %04o, open to others: chmod 0600 %s (or 0640 to share it with a group)", what, path, perm, path)
	case perm&0o020 != 0:
		return fmt.Errorf("%s %s has mode %04o, writable by its group: chmod 0600 %s (or 0640 to share it with a group)", what, path, perm, path)
	case owner != self && owner != 0:
		return fmt.Errorf("%s %s is owned by uid %d, neither this server's user (uid %d) nor root: chown it to one of them", what, path, owner, self)
	}
	return nil
}

// refreshToken reads the token file again when it has changed since the
// token in use was read from it, at most once a second unless force; and
// at each such check, changed or not, after a failed read or while the
// token in use is failed (so a backend never stays failed while the file
// holds a fresh token). When it holds another token, the session in use
// is dropped (the next call looks the new token up) and any failure of
// the old token forgotten; it then reports true. A file that cannot be
// read leaves the token in use.
func (v *Vault) refreshToken(force bool) bool {
	tf := v.tf
	if tf == nil {
		return false
	}
	tf.mu.Lock()
	defer tf.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(tf.checked) < tokenFileCheck {
		return false
	}
	tf.checked = now
	v.mu.Lock()
	failed := v.failed != nil
	v.mu.Unlock()
	fi, err := os.Stat(tf.path)
	if err == nil && !tf.changed(fi) && !tf.unread && !failed {
		return false
	}
	tok, fi, err := readTokenFile(tf.path)
	if err != nil {
		tf.unread = true
		if !tf.warned {
			tf.warned = true
			v.log.Warn("vault token file unreadable; keeping the token in use and reading it again at the next use", "err", err)
		}
		return false
	}
	tf.fi, tf.warned, tf.unread = fi, false, false
	v.mu.Lock()
	defer v.mu.Unlock()
	if tok == v.staticToken {
		return false
	}
	v.staticToken = tok
	if s := v.sess; s != nil {
		v.sess = nil
		s.stopLocked()
	}
	v.failed = nil
	v.log.Info("vault token file holds a new token; using it", "file", tf.path)
	return true
}

// freshTokenHint says how token auth gets going again once its token is
// gone.
func (v *Vault) freshTokenHint() string {
	if v.tf != nil {
		return "write a fresh token to " + v.tf.path
	}
	return "restart with a fresh token"
}

// unwrapSecretID reads the response-wrapping token in the wrapped secret
// id file, checks with sys/wrapping/lookup that Vault created it for an
// AppRole secret id on this mount (a token wrapping anything else is
// refused, and left wrapped), unwraps it (sys/wrapping/unwrap) and
// removes the file. The secret id is returned, to be kept in memory only
// (never written to disk).
// A wrapping token Vault no longer knows was unwrapped before, or has
// expired: if coily did not unwrap it, someone else has the secret id.
func (v *Vault) unwrapSecretID(ctx context.Context) (string, error) {
	path := v.cfg.WrappedSecretIDFile
	wt, _, err := readSecretFile("the wrapped secret id file", path)
	if err != nil {
		return "", fmt.Errorf("wrapped secret id: %w", err)
	}
	lc, err := v.clientWith("")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	sec, err := lc.Logical().WriteWithContext(ctx, "sys/wrapping/lookup", map[string]any{"token": wt})
	if err != nil {
		if wrappingSpent(err) {
			return "", spentError(path, "before coily looked it up")
		}
		ce := v.classify(ctx, "wrapping token lookup (sys/wrapping/lookup)", scrub(err, wt), wt)
		return "", fmt.Errorf("wrapped secret id in %s: the lookup of its wrapping token failed (not known to be spent; it was not unwrapped): %w", path, ce)
	}
	created := ""
	if sec != nil {
		created, _ = sec.Data["creation_path"].(string)
	}
	if !secretIDPath(created, v.cfg.Mount) {
		return "", fmt.Errorf("%w: the token in %s does not wrap an AppRole secret id of auth/%s/ (it was created by %q); not unwrapped",
			ErrDenied, path, v.cfg.Mount, oneLine(created, 120))
	}
	uc, err := v.clientWith("")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	sec, err = uc.Logical().UnwrapWithContext(ctx, wt)
	if err != nil {
		if wrappingSpent(err) {
			return "", spentError(path, "between coily's lookup and its unwrap")
		}
		return "", fmt.Errorf("unwrapping the secret id in %s: %w", path, v.classify(ctx, "unwrap (sys/wrapping/unwrap)", scrub(err, wt), wt))
	}
	id := ""
	if sec != nil {
		id, _ = sec.Data["secret_id"].(string)
	}
	if id == "" {
		return "", fmt.Errorf("%w: the unwrapped response holds no secret_id", ErrDenied)
	}
	if err := os.Remove(path); err != nil {
		v.log.Warn("wrapped secret id unwrapped, but its file could not be removed (the wrapping token in it is spent)", "err", cause(err))
	}
	v.log.Info("vault approle secret id unwrapped; its file removed", "file", path, "created_by", created)
	return id, nil
}

// wrappingSpent reports whether Vault refused a wrapping token as one it
// does not know: unwrapped already, or expired (Vault says the same of
// both).
func wrappingSpent(err error) bool {
	var re *api.ResponseError
	return errors.As(err, &re) && re.StatusCode == 400 && mentions(re, "wrapping token is not valid or does not exist")
}

// spentError is the start's error for a wrapped secret id Vault no longer
// knows, spent when: someone may have intercepted it.
func spentError(path, when string) error {
	return fmt.Errorf("%w: the wrapped secret id in %s was spent %s: Vault no longer knows its wrapping token, which was "+
		"already unwrapped, or expired. If coily did not unwrap it, it may have been intercepted and someone else holds the "+
		"secret id: destroy it (its role's secret-id-accessor/destroy), investigate, and issue a new wrapped secret id",
		ErrDenied, path, when)
}

// secretIDPath reports whether p is auth/<mount>/role/<name>/secret-id.
func secretIDPath(p, mount string) bool {
	rest, ok := strings.CutPrefix(p, "auth/"+mount+"/role/")
	if !ok {
		return false
	}
	name, ok := strings.CutSuffix(rest, "/secret-id")
	return ok && name != "" && !strings.Contains(name, "/")
}
