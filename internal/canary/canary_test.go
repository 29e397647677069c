package canary

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Helper()                           {}

func TestCanaryFindsForms(t *testing.T) {
	const v = "s3cr3t/value+with=odd"
	pemKey := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----\n"
	for name, text := range map[string]string{
		"plain":     "x " + v + " y",
		"base64":    base64.StdEncoding.EncodeToString([]byte(v)),
		"base64url": base64.RawURLEncoding.EncodeToString([]byte(v)),
		"hex":       strings.ToUpper(hex.EncodeToString([]byte(v))),
		"pem line":  "…MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun…",
		"base32":    strings.ToLower(base32.StdEncoding.EncodeToString([]byte(v))),
		"query":     "https://x.test/?token=" + url.QueryEscape(v) + "&a=b",
		"labels":    "CONNECT " + strings.ToUpper(hex.EncodeToString([]byte(v))[:20]) + "." + hex.EncodeToString([]byte(v))[20:] + ".evil.test:443",
	} {
		r := &recorder{TB: t}
		c := New(r)
		c.AddString("SECRET", v)
		c.AddString("KEY", pemKey)
		c.CheckText(name, "nothing here", text)
		if len(r.errs) != 1 {
			t.Errorf("%s: %d failures", name, len(r.errs))
		}
	}
	r := &recorder{TB: t}
	c := New(r)
	c.AddString("SECRET", v)
	c.CheckText("clean", "s3cr3t/value", "nothing")
	if len(r.errs) != 0 {
		t.Errorf("false positive: %q", r.errs)
	}
}

func TestCanaryFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("token: ghs_abcdefghijkl"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	c := New(r)
	c.AddString("TOKEN", "ghs_abcdefghijkl")
	c.CheckFiles(dir, filepath.Join(dir, "missing"))
	if len(r.errs) != 1 {
		t.Fatalf("%d failures: %q", len(r.errs), r.errs)
	}
}

// A secret in a process's argv is seen; so is the marker.
func TestCanaryArgv(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc")
	}
	r := &recorder{TB: t}
	c := New(r)
	w := c.WatchArgv()
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.3", "ghs_inargv12345")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.AddString("TOKEN", "ghs_inargv12345") // added during the run: still caught
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	w.Stop("sleep 0.3", "never-seen-marker")
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "command line") || !strings.Contains(r.errs[1], "missed") {
		t.Fatalf("failures %q", r.errs)
	}
}

// A secret in a running process's environment is found in its memory,
// read from outside it; the proof is seen; a clean process passes.
func TestCanaryMemory(t *testing.T) {
	start := func(env string) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.Env = []string{env}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	dirty, clean := start("T=ghs_inmemory98765"), start("P=coily-placeholder-proof")
	r := &recorder{TB: t}
	c := New(r)
	c.AddString("TOKEN", "ghs_inmemory98765")
	seen, n := c.CheckMemory([]int{clean.Process.Pid}, []byte("coily-placeholder-proof"))
	if !seen || n == 0 || len(r.errs) != 0 {
		t.Fatalf("clean process: proof seen %v, %d bytes, failures %q", seen, n, r.errs)
	}
	if seen, _ := c.CheckMemory([]int{dirty.Process.Pid}, []byte("coily-placeholder-proof")); seen || len(r.errs) != 1 {
		t.Fatalf("process holding the token: proof seen %v, failures %q", seen, r.errs)
	}
	pids, err := PIDNamespace(clean.Process.Pid)
	if err != nil || !slices.Contains(pids, clean.Process.Pid) || !slices.Contains(pids, os.Getpid()) {
		t.Errorf("PIDNamespace: %v %v", pids, err)
	}
}
