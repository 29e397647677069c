package policy

import "testing"

// JudgeAsUID makes OpenBinary judge who may write a pinned binary as if
// the server ran as uid, until the test ends. Tests that pin a copy they
// own (so not root-owned) judge as a user that owns nothing.
func JudgeAsUID(t testing.TB, uid int) {
	old := serverUID
	serverUID = func() int { return uid }
	t.Cleanup(func() { serverUID = old })
}

// NobodysUID owns no file a test makes.
const NobodysUID = 1<<31 - 2

// Unchecked is a copy of the spec as if it had never been validated, for
// comparing loaded rules with rules written out in a test.
func Unchecked(a ArgSpec) ArgSpec {
	a.checked = false
	return a
}

// Checked reports whether the spec recorded a passed validation.
func Checked(a *ArgSpec) bool { return a.checked }

// WithoutSections parses as a binary linking no section would, until the
// test ends.
func WithoutSections(t testing.TB) {
	sections.Lock()
	old := sections.list
	sections.list = nil
	sections.Unlock()
	t.Cleanup(func() {
		sections.Lock()
		sections.list = old
		sections.Unlock()
	})
}
