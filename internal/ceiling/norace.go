//go:build !race

package ceiling

const raceFactor = 1
