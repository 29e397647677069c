package egress

// Budget is a server-wide cap on egress connections, shared by the
// proxies of every exec (Config.Shared), so that many commands each under
// their own cap cannot together exhaust the server's descriptors.
type Budget struct {
	sem chan struct{}
}

// NewBudget allows n connections at once across the proxies sharing it.
func NewBudget(n int) *Budget {
	return &Budget{sem: make(chan struct{}, max(n, 1))}
}

// Cap is the number of connections the budget allows at once.
func (b *Budget) Cap() int { return cap(b.sem) }

func (b *Budget) acquire() bool {
	if b == nil {
		return true
	}
	select {
	case b.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (b *Budget) release() {
	if b != nil {
		<-b.sem
	}
}
