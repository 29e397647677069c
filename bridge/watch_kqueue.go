//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package bridge

import (
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// kqueuePoll is how long a kevent wait lasts before the watcher checks
// whether it should stop.
const kqueuePoll = 250 * time.Millisecond

// startWatch calls wake whenever an entry of one of the directories
// changes, until stop is called (stop returns once the watcher's goroutine
// has ended). Events are only a trigger: the rescan is the backstop, so a
// watcher that cannot be set up is logged and done without.
//
// fsnotify is not used here: its kqueue backend opens every entry of a
// watched directory (following symbolic links, and blocking on a FIFO
// reached through one) and holds a descriptor per file, all of which the
// sandbox controls. Instead the directories the bridge already holds are
// registered with kqueue for NOTE_WRITE, which fires when an entry is
// added, removed or renamed.
var startWatch = func(log *slog.Logger, dirs []*dir, wake func()) (stop func()) {
	kq, err := unix.Kqueue()
	if err != nil {
		log.Warn("no file-system events; rescanning only", "err", err)
		return func() {}
	}
	unix.CloseOnExec(kq)
	changes := make([]unix.Kevent_t, len(dirs))
	for i, d := range dirs {
		unix.SetKevent(&changes[i], d.fd, unix.EVFILT_VNODE, unix.EV_ADD|unix.EV_CLEAR|unix.EV_ENABLE)
		changes[i].Fflags = unix.NOTE_WRITE | unix.NOTE_DELETE | unix.NOTE_RENAME
	}
	if _, err := unix.Kevent(kq, changes, nil, nil); err != nil {
		unix.Close(kq)
		log.Warn("no file-system events; rescanning only", "err", err)
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		events := make([]unix.Kevent_t, 8)
		timeout := unix.NsecToTimespec(int64(kqueuePoll))
		for {
			select {
			case <-quit:
				return
			default:
			}
			n, err := unix.Kevent(kq, nil, events, &timeout)
			switch {
			case errors.Is(err, unix.EINTR):
			case err != nil:
				log.Warn("file-system events stopped; rescanning only", "err", err)
				return
			case n > 0:
				wake()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		unix.Close(kq)
	}
}
