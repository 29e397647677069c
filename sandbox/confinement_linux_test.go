package sandbox

import (
	"path/filepath"
	"sync"
	"testing"
)

// Finish and Close drop the command's cgroup while a lockout may be
// killing it (Kill): under the confinement's lock (go test -race).
func TestConfinementCgroupUnderLock(t *testing.T) {
	for _, end := range []func(*Confinement){func(c *Confinement) { c.Finish("T") }, (*Confinement).Close} {
		c := &Confinement{cgroup: &execCgroup{dir: filepath.Join(t.TempDir(), "gone")}}
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 100 {
				c.Kill()
			}
		})
		end(c)
		wg.Wait()
	}
}
