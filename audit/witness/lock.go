package witness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockFile is the file in a witness's state directory the serving
// witness holds an flock on: `coily witness forget` refuses while it is
// held (the serving process would write its whole state back from
// memory, undoing the forget).
const LockFile = "witness.lock"

// ErrServing is returned by Forget while a witness serves the state.
var ErrServing = errors.New("witness: a witness is serving this state: stop it first")

// lockState takes the state's lock without waiting.
func lockState(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("witness: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrServing, dir)
		}
		return nil, fmt.Errorf("witness: lock: %w", err)
	}
	return f, nil
}
