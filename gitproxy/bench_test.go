package gitproxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
)

// BenchmarkGitProxyVsDirect measures git through the proxy against git
// talking to the same upstream directly (the stand-in's git http-backend
// over TLS; direct git on a copy of the repository), interleaved, on a
// generated repository of about 50 MB: a
// fresh clone with the proxy's cache cold and warm, a fetch with nothing
// new, and a push of a one-commit change. It reports each arm's p50 and
// p99, the ratios to direct, and the request bytes the upstream received
// per push each way: of git-receive-pack (the push itself) and of every
// request (with the proxy's refreshes). One iteration is one of each.
func BenchmarkGitProxyVsDirect(b *testing.B) {
	e := newEnv(b, "")
	genRepo(b, e.up.Dir("owner/app"), 24, 50<<20)
	// Direct git works on a copy, so that its pushes are not news the
	// proxy's refreshes would fetch.
	if err := os.RemoveAll(e.up.Dir("owner/other")); err != nil {
		b.Fatal(err)
	}
	if err := os.CopyFS(e.up.Dir("owner/other"), os.DirFS(e.up.Dir("owner/app"))); err != nil {
		b.Fatal(err)
	}
	direct := e.up.RepoURL("owner/other")
	proxied := e.url("owner/app.git")
	dEnv := append(e.up.Env(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("x:"+testToken)))
	run := func(env []string, dir string, args ...string) {
		if out, err := e.benchGit(env, dir, args...); err != nil {
			b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	scratch := b.TempDir()
	clone := func(env []string, url string) func() {
		return func() {
			dst, err := os.MkdirTemp(scratch, "c-")
			if err != nil {
				b.Fatal(err)
			}
			run(env, "", "clone", "--quiet", "--bare", url, dst)
			os.RemoveAll(dst)
		}
	}
	// The working clones that fetch and push, one each way.
	dWork, pWork := filepath.Join(scratch, "direct"), filepath.Join(scratch, "proxy")
	run(dEnv, "", "clone", "--quiet", direct, dWork)
	run(nil, "", "clone", "--quiet", proxied, pWork)
	run(dEnv, dWork, "checkout", "--quiet", "-b", "agent/bench")
	run(nil, pWork, "checkout", "--quiet", "-b", "agent/bench")
	// The push and cold clone arms time only the git command, not the
	// commit or the cache's removal before it.
	n := map[string]int{}
	pushBytes, packBytes, pushTimes := map[string]int64{}, map[string]int64{}, map[string][]time.Duration{}
	var coldTimes []time.Duration
	push := func(env []string, dir, arm string) func() {
		return func() {
			n[arm]++
			if err := os.WriteFile(filepath.Join(dir, "CHANGE"), fmt.Appendf(nil, "change %d\n", n[arm]), 0o644); err != nil {
				b.Fatal(err)
			}
			run(env, dir, "add", "CHANGE")
			run(env, dir, "commit", "--quiet", "-m", fmt.Sprintf("change %d", n[arm]))
			before, pack := e.up.Received(""), e.up.Received("git-receive-pack")
			t0 := time.Now()
			run(env, dir, "push", "--quiet", "origin", "HEAD")
			pushTimes[arm] = append(pushTimes[arm], time.Since(t0))
			pushBytes[arm] += e.up.Received("") - before
			packBytes[arm] += e.up.Received("git-receive-pack") - pack
		}
	}
	cold := func() {
		if err := os.RemoveAll(filepath.Join(e.proxy.cfg.Dir, "cache")); err != nil {
			b.Fatal(err)
		}
		os.Mkdir(filepath.Join(e.proxy.cfg.Dir, "cache"), 0o700)
		t0 := time.Now()
		clone(nil, proxied)()
		coldTimes = append(coldTimes, time.Since(t0))
	}
	d := benchstat.Interleave(b,
		clone(dEnv, direct), cold, clone(nil, proxied),
		func() { run(dEnv, dWork, "fetch", "--quiet", "origin") }, func() { run(nil, pWork, "fetch", "--quiet", "origin") },
		push(dEnv, dWork, "direct"), push(nil, pWork, "proxy"))
	cloneD, cloneW, fetchD, fetchP := d[0], d[2], d[3], d[4]
	pushD, pushP := pushTimes["direct"], pushTimes["proxy"]
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"clone-direct", cloneD}, {"clone-cold", coldTimes}, {"clone-warm", cloneW},
		{"fetch-direct", fetchD}, {"fetch-proxy", fetchP}, {"push-direct", pushD}, {"push-proxy", pushP}} {
		benchstat.Report(b, r.name, r.d)
	}
	b.ReportMetric(benchstat.Ratio(coldTimes, cloneD, 50), "clone-cold-ratio")
	b.ReportMetric(benchstat.Ratio(cloneW, cloneD, 50), "clone-warm-ratio")
	b.ReportMetric(benchstat.Ratio(fetchP, fetchD, 50), "fetch-ratio")
	b.ReportMetric(benchstat.Ratio(pushP, pushD, 50), "push-ratio")
	for _, arm := range []string{"direct", "proxy"} {
		b.ReportMetric(float64(packBytes[arm])/float64(b.N), "push-receive-pack-B-"+arm)
		b.ReportMetric(float64(pushBytes[arm])/float64(b.N), "push-upstream-B-"+arm)
	}
}

// benchGit runs git as e.git does, with env added.
func (e *env) benchGit(extra []string, dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=Agent",
		"GIT_COMMITTER_EMAIL=agent@example.com", "LC_ALL=C"}, extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// genRepo fills the bare repository dir with a history of about size
// bytes, the same for the same seed: commits each adding an
// incompressible blob and changing one of a few text files, by git
// fast-import.
func genRepo(b testing.TB, dir string, seed uint64, size int) {
	b.Helper()
	const blob = 160 << 10
	rng := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'c', 'o', 'i', 'l', 'y'}))
	cmd := exec.Command("git", "--git-dir", dir, "fast-import", "--quiet")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir}
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, errb := &strings.Builder{}, &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(in, 1<<20)
	data := func(p []byte) { fmt.Fprintf(w, "data %d\n", len(p)); w.Write(p); w.WriteString("\n") }
	texts := make([][]string, 8)
	buf := make([]byte, blob)
	for i := range size / blob {
		fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\ncommitter Bench <bench@example.com> %d +0000\n", i+1, 1_700_000_000+i*60)
		data(fmt.Appendf(nil, "commit %d", i))
		if i > 0 {
			fmt.Fprintf(w, "from :%d\n", i)
		}
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		fmt.Fprintf(w, "M 100644 inline data/%03d/blob-%04d.bin\n", i%100, i)
		data(buf)
		t := &texts[i%len(texts)]
		for range 50 {
			*t = append(*t, fmt.Sprintf("line %d of commit %d: %x", len(*t), i, rng.Uint64()))
		}
		fmt.Fprintf(w, "M 100644 inline src/file-%d.txt\n", i%len(texts))
		data([]byte(strings.Join(*t, "\n") + "\n"))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("git fast-import: %v\n%s", err, errb)
	}
}
