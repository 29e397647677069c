// Package procs lists, for tests, the live processes of the machine, read
// from /proc: what a test looks for to show that a command's processes
// are gone (a kill, a lockout, a timeout) or still there. A zombie is not
// live: it is gone but for its parent's wait. Where there is no /proc
// there is no process to list.
package procs

import (
	"os"
	"strconv"
	"strings"
)

// Proc is one live process.
type Proc struct {
	PID     int
	Cmdline string // its arguments, each ended by a NUL
	Session string // its session's id
}

// Live returns the pids of the live processes for which match holds.
func Live(match func(Proc) bool) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := read(pid)
		if ok && match(p) {
			out = append(out, pid)
		}
	}
	return out
}

// read reads process pid; ok is false when it is gone or a zombie.
func read(pid int) (p Proc, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	stat, err := os.ReadFile(dir + "stat")
	if err != nil {
		return Proc{}, false
	}
	state, session, ok := parseStat(string(stat))
	if !ok || state == "Z" {
		return Proc{}, false
	}
	cmdline, err := os.ReadFile(dir + "cmdline")
	if err != nil {
		return Proc{}, false
	}
	return Proc{PID: pid, Cmdline: string(cmdline), Session: session}, true
}

// parseStat returns the state and the session of a /proc/PID/stat line:
// "pid (comm) state ppid pgrp session …", where comm may hold spaces and
// parentheses (the last ')' ends it).
func parseStat(s string) (state, session string, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return "", "", false
	}
	return f[0], f[3], true
}
