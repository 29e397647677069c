//go:build race

package ceiling

// raceFactor scales a ceiling under the race detector, whose shadow
// memory counts as the heap does.
const raceFactor = 8
