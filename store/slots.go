package store

// Slot is one concurrency slot held: who runs a command under which rule.
// Where several hosts share the slots (store/etcdstore), it is the value
// of the slot's key.
type Slot struct {
	Principal string `json:"principal"`
	Rule      string `json:"rule"`
}

// Tally counts the slots held that one claim's caps look at: those of its
// principal under its rule (Both), of its principal (Principal), under its
// rule (Rule) and all of them (All).
type Tally struct {
	Both, Principal, Rule, All int
}

// Count adds the slot held h to t, as seen by a claim for s.
func (t *Tally) Count(s, h Slot) {
	t.All++
	if h.Principal == s.Principal {
		t.Principal++
	}
	if h.Rule == s.Rule {
		t.Rule++
	}
	if h == s {
		t.Both++
	}
}
