//go:build !(darwin || dragonfly || freebsd || netbsd || openbsd)

package bridge

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/fsnotify/fsnotify"
)

// startWatch calls wake whenever an entry of one of the directories
// changes, until stop is called (stop returns once the watcher's goroutine
// has ended). Events are only a trigger: the rescan is the backstop, so a
// watcher that cannot be set up is logged and done without.
//
// On Linux the watch is put on /proc/self/fd/N, the directory the bridge
// holds, rather than on its path, which the sandbox may have swapped since
// (inotify reads no file, so fsnotify is safe here; see watch_kqueue.go for
// the BSDs).
var startWatch = func(log *slog.Logger, dirs []*dir, wake func()) (stop func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("no file-system events; rescanning only", "err", err)
		return func() {}
	}
	for _, d := range dirs {
		err := errors.New("not tried")
		if runtime.GOOS == "linux" {
			err = w.Add(fmt.Sprintf("/proc/self/fd/%d", d.fd))
		}
		if err != nil {
			err = w.Add(d.path)
		}
		if err != nil {
			log.Warn("no file-system events for a directory; rescanning only", "dir", d.name, "err", err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				wake()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file-system events", "err", err) // e.g. an overflow: rescan now
				wake()
			}
		}
	}()
	return func() {
		_ = w.Close()
		<-done
	}
}
