package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/internal/testlog"
)

// A full disk under the state directory (a small tmpfs), filled while a
// command runs and requests arrive, then freed; every other round the
// server is killed while the disk is full and restarted once it has room.
func chaosFullDisk(t *testing.T, rounds int) []*chaosResult {
	requireComponent(t, os.Geteuid() == 0, "root (to mount a small tmpfs for the full disk)")
	dir := shortDir(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	r := newChaosRig(t, dir, false)
	res := &chaosResult{name: "full disk under the state dir", rounds: rounds}
	gates, filler := shortDir(t), filepath.Join(dir, "filler")
	outcomes := map[string]int{}
	for i := range rounds {
		running := r.l.start(r.grpc(), "until [ -e "+gates+"/$M ]; do sleep 0.05; done")
		r.l.waitRan(running)
		before := r.closedness(t)
		fillDisk(t, filler)
		t0 := time.Now()
		if err := os.WriteFile(filepath.Join(gates, running.marker), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		full := []*chaosCall{running, r.l.run(r.grpc(), "true"), r.l.run(r.grpc(), "true")}
		running.wait(90 * time.Second)
		for _, c := range full {
			outcome := fmt.Sprintf("exit %d", c.code)
			if c.refusal != "" {
				outcome = "refused " + c.refusal
			}
			outcomes[outcome]++
		}
		killed := i%2 == 1
		if killed {
			r.serve.kill()
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if killed {
			p, out := startServeMaybe(t, r.dir, r.pol)
			if p == nil {
				t.Fatalf("round %d: the server does not start after a kill on a full disk:\n%s", i, out)
			}
			r.serve = p
		}
		if after := r.closedness(t); after < before {
			res.moreOpen++
		}
		d, err := r.l.probe(r.grpc(), t0)
		if err != nil {
			t.Fatalf("round %d: %v\nserver log:\n%s", i, err, r.serve.log)
		}
		res.recover = append(res.recover, d)
	}
	r.finish(res)
	res.notes = append(res.notes, fmt.Sprintf("answers while full (the running command's, two new execs' each round): %v", outcomes))
	return []*chaosResult{res}
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// The last partial page: fill it byte-wise-ish.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

// startServeMaybe starts `coily serve` and returns it once it answers, or
// nil and its output if it exits first (it refused to start).
func startServeMaybe(t *testing.T, dir, policyPath string) (*serveProc, string) {
	t.Helper()
	p := &serveProc{log: new(testlog.Buffer), dir: dir, socket: filepath.Join(dir, "coily.sock")}
	p.cmd = exec.Command(coilyBin, "serve", "--state-dir", dir, "--policy", policyPath)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if exitedUnreaped(p.cmd.Process.Pid) {
			_ = p.cmd.Wait()
			return nil, p.log.String()
		}
		if r := p.run(t, "status"); r.code == 0 {
			return p, ""
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server neither answered nor exited within 20 s:\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitedUnreaped reports whether the child pid has exited (a zombie),
// without reaping it: its exec.Cmd may still Wait.
func exitedUnreaped(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z'
}

// damage is one way a state file gets damaged.
type damage struct {
	name string
	do   func(path string) error
}

var damages = []damage{
	{"zeroed", func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		return os.WriteFile(p, make([]byte, fi.Size()), 0o600)
	}},
	{"truncated to half", func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		return os.Truncate(p, fi.Size()/2)
	}},
	{"0 bytes", func(p string) error { return os.Truncate(p, 0) }},
	{"deleted", os.Remove},
	{"garbage over the data pages", func(p string) error {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 2048))
		_, err = f.WriteAt(junk, 8192)
		return err
	}},
}

// A damaged coily.db next to an intact audit log, with the server locked
// out (or not) before: it must refuse to start or start locked out, never
// more open than before; `coily state rebuild` and unlock bring it back.
func chaosDamagedDB(t *testing.T, _ int) []*chaosResult {
	res := &chaosResult{name: "damaged coily.db (5 kinds × locked/open)"}
	for _, dmg := range damages {
		for _, locked := range []bool{true, false} {
			res.rounds++
			r := newChaosRig(t, shortDir(t), false)
			for range 2 {
				r.l.run(r.grpc(), "true")
			}
			if locked {
				r.ctl(t, "lockout", "--reason", "chaos")
			}
			before := r.closedness(t)
			r.serve.kill()
			if err := dmg.do(filepath.Join(r.dir, "coily.db")); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			p, out := startServeMaybe(t, r.dir, r.pol)
			how := "refused to start"
			if p == nil {
				if res := runCoily(t, nil, "state", "rebuild", "--state-dir", r.dir); res.code != 0 {
					t.Fatalf("%s: state rebuild: %+v\nserve said: %s", dmg.name, res, out)
				}
				if p, out = startServeMaybe(t, r.dir, r.pol); p == nil {
					t.Fatalf("%s: no start after rebuild:\n%s", dmg.name, out)
				}
			} else {
				how = "started"
			}
			r.serve = p
			after := r.closedness(t)
			how += fmt.Sprintf(", then %s", map[int]string{0: "open", 1: "paused", 2: "locked out"}[after])
			if after < before {
				res.moreOpen++
				how += " (MORE OPEN than before)"
			}
			res.notes = append(res.notes, fmt.Sprintf("%s, %s before: %s", dmg.name, map[bool]string{true: "locked out", false: "open"}[locked], how))
			if after == 2 {
				r.ctl(t, "unlock", "--reason", "chaos: checked")
			}
			d, err := r.l.probe(r.grpc(), t0)
			if err != nil {
				t.Fatalf("%s: %v", dmg.name, err)
			}
			res.recover = append(res.recover, d)
			r.finish(res)
		}
	}
	return []*chaosResult{res}
}
