//go:build race

package etcdtest

const raceEnabled = true
