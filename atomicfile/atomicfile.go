// Package atomicfile writes a file whole or not at all: the data goes to a
// temporary file in the same directory, is synced, and is then renamed (or
// linked) into place, and the directory is synced, so that a crash leaves
// either the old file or the new one, never a torn or empty one. Readers of
// files someone else may have put at a path use package regularfile.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode perm. A symbolic link at path is
// replaced, not followed (rename never writes through a link).
func Write(path string, data []byte, perm fs.FileMode) error {
	tmp, err := temp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("atomicfile: %w", err)
	}
	return SyncDir(filepath.Dir(path))
}

// Create writes data to path, with mode perm, only if nothing is there yet:
// the file is linked into place, so that of two writers one wins and the
// other gets an error satisfying errors.Is(err, fs.ErrExist).
func Create(path string, data []byte, perm fs.FileMode) error {
	tmp, err := temp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	return SyncDir(filepath.Dir(path))
}

// temp writes data to a new temporary file beside path, synced and closed,
// and returns its name; on failure nothing is left behind.
func temp(path string, data []byte, perm fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("atomicfile: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("atomicfile: %s: %w", path, err)
	}
	return f.Name(), nil
}

// SyncDir makes the entries last created, renamed or removed in dir
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("atomicfile: sync %s: %w", dir, err)
	}
	return nil
}
