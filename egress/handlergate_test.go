package egress

import (
	"sync"
	"testing"
)

// TestHandlerGate: handlers that enter while the connection is open are
// waited for; one that starts after close is refused, under -race with
// enters racing the close (a WaitGroup.Add racing Wait is what -race
// reports otherwise).
func TestHandlerGate(t *testing.T) {
	for range 50 {
		var g handlerGate
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted, finished := 0, 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g.enter() {
					mu.Lock()
					admitted++
					mu.Unlock()
					defer g.leave()
					mu.Lock()
					finished++
					mu.Unlock()
				}
			}()
		}
		g.close()
		mu.Lock()
		if admitted != finished {
			t.Fatalf("close returned with %d of %d admitted handlers unfinished", admitted-finished, admitted)
		}
		mu.Unlock()
		if g.enter() {
			t.Fatal("a handler entered after close")
		}
		wg.Wait()
	}
}
