package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The version the tests release: a pre-release, so that Debian's version
// (with ~) differs from the binaries' (with -).
const (
	testVersion    = "1.2.3-rc1"
	testDebVersion = "1.2.3~rc1"
)

// The platforms the tests build: the server's (and its package) and the
// phone's. The other two differ only in GOOS/GOARCH.
var testPlatforms = []string{"linux/amd64", "android/arm64"}

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
)

// release runs scripts/release.sh once per test binary into a directory
// that outlives the tests that share it.
func release(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	releaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coily-release-")
		if err != nil {
			releaseErr = err
			return
		}
		releaseDir = filepath.Join(dir, "dist")
		releaseErr = runRelease(releaseDir, "022")
	})
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseDir != "" {
		os.RemoveAll(filepath.Dir(releaseDir))
	}
	os.Exit(code)
}

// runRelease runs scripts/release.sh under umask (it sets its own).
func runRelease(out, umask string) error {
	args := append([]string{"-c", `umask "$0" && exec bash "$@"`, umask, "../scripts/release.sh", "-v", testVersion, "-o", out},
		testPlatforms...)
	cmd := exec.Command("bash", args...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/release.sh: %v\n%s", err, b)
	}
	return nil
}

// commitTime is SOURCE_DATE_EPOCH as the release script takes it.
func commitTime(t *testing.T) time.Time {
	t.Helper()
	b, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(sec, 0)
}

func TestReleaseChecksums(t *testing.T) {
	dist := release(t)
	want := []string{ // sorted as bytes, as SHA256SUMS is
		"BUILDINFO",
		"coily-client_" + testVersion + "_android_arm64.tar.gz",
		"coily_" + testVersion + "_linux_amd64.tar.gz",
		"coily_" + testDebVersion + "_amd64.deb",
	}
	sums, names := readSums(t, filepath.Join(dist, "SHA256SUMS"))
	for name, sum := range sums {
		if got := fileSHA256(t, filepath.Join(dist, name)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", names, want)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want)+1 { // no leftovers
		t.Errorf("dist holds %d files, want %d and SHA256SUMS", len(entries), len(want))
	}
	// sha256sum itself agrees.
	cmd := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
}

// readSums parses sha256sum's format strictly: 64 hex digits, two spaces,
// a plain file name; one name once. It returns the sums and the names in
// the file's order.
func readSums(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || name == "" || strings.ContainsAny(name, "/\\") {
			t.Fatalf("SHA256SUMS: bad line %q", sc.Text())
		}
		if _, dup := sums[name]; dup {
			t.Fatalf("SHA256SUMS: %s twice", name)
		}
		sums[name] = sum
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums, names
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

type archived struct {
	mode os.FileMode
	body []byte
}

// readArchive checks what every release archive must be — one top
// directory named as the archive, owners root, every time the commit's,
// entries sorted — and returns its files by path below that directory.
func readArchive(t *testing.T, path string) map[string]archived {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("%s: gzip header carries a name %q or time %v", path, zr.Name, zr.ModTime)
	}
	top := strings.TrimSuffix(filepath.Base(path), ".tar.gz") + "/"
	mtime := commitTime(t)
	files := map[string]archived{}
	var order []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		if !strings.HasPrefix(h.Name, top) {
			t.Errorf("%s: entry %q outside %s", path, h.Name, top)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s owned by %d:%d, want 0:0", path, h.Name, h.Uid, h.Gid)
		}
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s: %s time %v, want the commit's %v", path, h.Name, h.ModTime, mtime)
		}
		if h.Typeflag == tar.TypeDir && os.FileMode(h.Mode).Perm() != 0o755 {
			t.Errorf("%s: directory %s mode %v, want 0755", path, h.Name, os.FileMode(h.Mode).Perm())
		}
		if h.Typeflag == tar.TypeReg {
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, top)] = archived{mode: os.FileMode(h.Mode).Perm(), body: body}
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("%s: entries not sorted: %q", path, order)
	}
	return files
}

// checkBinary reads a binary's build information: the platform, a
// production build (no coilydev tag) with the release's flags.
func checkBinary(t *testing.T, path, goos, goarch, mainPath string) {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if info.Path != mainPath {
		t.Errorf("%s: main package %s, want %s", path, info.Path, mainPath)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"GOOS": goos, "GOARCH": goarch, "CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("%s: build setting %s=%q, want %q", path, k, settings[k], v)
		}
	}
	// With -trimpath, go leaves -ldflags out of the build information: the
	// version -X stamped is looked for in the binary itself.
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(testVersion)) {
		t.Errorf("%s: no version %s in the binary", path, testVersion)
	}
	if tags := settings["-tags"]; strings.Contains(tags, "coilydev") {
		t.Errorf("%s: built with -tags %s: a release is the production build", path, tags)
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer ef.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if ef.Machine != want {
		t.Errorf("%s: ELF machine %v, want %v", path, ef.Machine, want)
	}
	// Static on Linux; on Android every executable is loaded by the
	// system's linker, which a Go binary names and needs nothing else of.
	interp := ""
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if want := map[string]string{"android": "/system/bin/linker64"}[goos]; interp != want {
		t.Errorf("%s: program interpreter %q, want %q", path, interp, want)
	}
	if libs, err := ef.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s: needs shared libraries %q (%v), want none", path, libs, err)
	}
}

func extract(t *testing.T, files map[string]archived, name string) string {
	t.Helper()
	f, ok := files[name]
	if !ok {
		t.Fatalf("archive has no %s", name)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(path, f.body, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReleaseLinuxArchive(t *testing.T) {
	dist := release(t)
	files := readArchive(t, filepath.Join(dist, "coily_"+testVersion+"_linux_amd64.tar.gz"))
	want := map[string]os.FileMode{"coily": 0o755, "coily-client": 0o755, "coily-exec": 0o755, "git-remote-coily": 0o755, "coily.service": 0o644,
		"policy.yaml": 0o644, "coily.env": 0o644, "README.md": 0o644, "apparmor/coily": 0o644}
	checkFiles(t, files, want)
	for _, name := range []string{"coily.service", "policy.yaml", "coily.env", "README.md", "apparmor/coily"} {
		sameAsRepo(t, files, name, repoPath(name))
	}
	coily := extract(t, files, "coily")
	checkBinary(t, coily, "linux", "amd64", "coily.dev/coily/cmd/coily")
	checkBinary(t, extract(t, files, "coily-client"), "linux", "amd64", "coily.dev/coily/cmd/coily-client")
	fast := extract(t, files, "coily-exec")
	checkBinary(t, fast, "linux", "amd64", "coily.dev/coily/cmd/coily-exec")
	helper := extract(t, files, "git-remote-coily")
	checkBinary(t, helper, "linux", "amd64", "coily.dev/coily/cmd/git-remote-coily")
	// Every binary says the release's version and commit, as BUILDINFO does.
	line := testVersion + " (commit " + buildInfoCommit(t, dist) + ")"
	client := extract(t, files, "coily-client")
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{coily, []string{"version"}, "coily " + line},
		{coily, []string{"--version"}, "coily " + line},
		{client, []string{"version"}, "coily " + line},
		{client, []string{"--version"}, "coily " + line},
		{fast, []string{"--version"}, "coily-exec " + line},
		{helper, []string{"--version"}, "git-remote-coily " + line},
	} {
		if out, err := exec.Command(c.bin, c.args...).CombinedOutput(); err != nil || string(out) != c.want+"\n" {
			t.Errorf("%s %s: %q, %v; want %q", filepath.Base(c.bin), strings.Join(c.args, " "), out, err, c.want)
		}
	}
	out, err := exec.Command(coily, "version", "--json").Output()
	var v struct{ Version, Commit string }
	if err != nil || json.Unmarshal(out, &v) != nil || v.Version != testVersion || v.Commit != buildInfoCommit(t, dist) {
		t.Errorf("coily version --json: %s, %v", out, err)
	}
	// The production build has no `coily dev`.
	if out, err := exec.Command(coily, "dev", "--help").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown command") {
		t.Errorf("coily dev --help: %v\n%s\nwant an unknown command", err, out)
	}
}

// buildInfoCommit is the commit BUILDINFO names, which must be the
// checkout's.
func buildInfoCommit(t *testing.T, dist string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "BUILDINFO"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if c, ok := strings.CutPrefix(l, "commit: "); ok && len(c) == 40 {
			return c
		}
	}
	t.Fatalf("BUILDINFO names no commit:\n%s", b)
	return ""
}

func TestReleaseAndroidArchive(t *testing.T) {
	dist := release(t)
	files := readArchive(t, filepath.Join(dist, "coily-client_"+testVersion+"_android_arm64.tar.gz"))
	want := map[string]os.FileMode{"coily-client": 0o755, "termux/phone.env": 0o644, "termux/phone.md": 0o644}
	for _, s := range termuxScripts {
		want["termux/"+s] = 0o755
	}
	checkFiles(t, files, want)
	for _, s := range append(slices.Clone(termuxScripts), "phone.env") {
		sameAsRepo(t, files, "termux/"+s, filepath.Join("termux", s))
	}
	sameAsRepo(t, files, "termux/phone.md", "../docs/phone.md")
	checkBinary(t, extract(t, files, "coily-client"), "android", "arm64", "coily.dev/coily/cmd/coily-client")
}

func TestReleaseDebianPackage(t *testing.T) {
	dist := release(t)
	deb := filepath.Join(dist, "coily_"+testDebVersion+"_amd64.deb")
	fields := map[string]string{"Package": "coily", "Version": testDebVersion, "Architecture": "amd64",
		"Depends": "procps", "Recommends": "bubblewrap", "Section": "admin"}
	for k, v := range fields {
		out, err := exec.Command("dpkg-deb", "--field", deb, k).Output()
		if err != nil {
			t.Fatalf("dpkg-deb --field %s: %v", k, err)
		}
		if got := strings.TrimSpace(string(out)); got != v {
			t.Errorf("%s: %s is %q, want %q", deb, k, got, v)
		}
	}
	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{} // path: "mode owner"
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents: %q", line)
		}
		listed[strings.TrimPrefix(f[5], ".")] = f[0] + " " + f[1]
	}
	want := map[string]string{
		"/usr/bin/coily":                            "-rwxr-xr-x root/root",
		"/usr/bin/coily-client":                     "-rwxr-xr-x root/root",
		"/usr/bin/coily-exec":                       "-rwxr-xr-x root/root",
		"/usr/bin/git-remote-coily":                 "-rwxr-xr-x root/root",
		"/usr/lib/systemd/system/coily.service":     "-rw-r--r-- root/root",
		"/etc/coily/":                               "drwxr-x--- root/coily",
		"/etc/coily/policy.yaml":                    "-rw-r----- root/coily",
		"/etc/coily/coily.env":                      "-rw-r----- root/coily",
		"/usr/share/doc/coily/operations.md":        "-rw-r--r-- root/root",
		"/usr/share/doc/coily/examples/policy.yaml": "-rw-r--r-- root/root",
		"/etc/apparmor.d/coily":                     "-rw-r--r-- root/root",
	}
	for path, w := range want {
		if listed[path] != w {
			t.Errorf("%s: %q in the package, want %q", path, listed[path], w)
		}
	}
	if _, ok := listed["/var/lib/coily/"]; ok {
		t.Error("the package owns /var/lib/coily: removing it could take the state; the postinst makes it")
	}
	conf, err := exec.Command("dpkg-deb", "--info", deb, "conffiles").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(conf))
	slices.Sort(got)
	if want := []string{"/etc/apparmor.d/coily", "/etc/coily/coily.env", "/etc/coily/policy.yaml"}; !slices.Equal(got, want) {
		t.Errorf("conffiles %q, want %q", got, want)
	}
}

// TestReleaseReproducible: the same commit built again into another
// directory, by a caller with a restrictive umask, gives the same bytes,
// archives and package included.
func TestReleaseReproducible(t *testing.T) {
	first := release(t)
	second := filepath.Join(t.TempDir(), "dist")
	if err := runRelease(second, "077"); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join(first, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(second, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("two builds of one commit differ:\n%s\n%s", a, b)
	}
}

func checkFiles(t *testing.T, files map[string]archived, want map[string]os.FileMode) {
	t.Helper()
	for name, mode := range want {
		f, ok := files[name]
		if !ok {
			t.Errorf("archive has no %s", name)
			continue
		}
		if f.mode != mode {
			t.Errorf("%s: mode %v, want %v", name, f.mode, mode)
		}
	}
	for name := range files {
		if _, ok := want[name]; !ok {
			t.Errorf("archive has an unexpected %s", name)
		}
	}
}

func sameAsRepo(t *testing.T, files map[string]archived, name, repoFile string) {
	t.Helper()
	b, err := os.ReadFile(repoFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(files[name].body) != string(b) {
		t.Errorf("archive's %s differs from %s", name, repoFile)
	}
}

// repoPath names a file the linux archive copies from the repository.
func repoPath(name string) string {
	if name == "README.md" {
		return "../README.md"
	}
	return name
}

// TestReleaseBuildInfo: BUILDINFO names the version, the commit, its time
// and the Go toolchain that built the release.
func TestReleaseBuildInfo(t *testing.T) {
	dist := release(t)
	b, err := os.ReadFile(filepath.Join(dist, "BUILDINFO"))
	if err != nil {
		t.Fatal(err)
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	gover, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("version: %s\ncommit: %s\nsource_date_epoch: %d\ngo: %s\nplatforms: %s\n", testVersion,
		strings.TrimSpace(string(commit)), commitTime(t).Unix(), strings.TrimSpace(string(gover)), strings.Join(testPlatforms, " "))
	if string(b) != want {
		t.Errorf("BUILDINFO:\n%s\nwant:\n%s", b, want)
	}
	// The binaries were built by that Go.
	files := readArchive(t, filepath.Join(dist, "coily_"+testVersion+"_linux_amd64.tar.gz"))
	info, err := buildinfo.ReadFile(extract(t, files, "coily"))
	if err != nil {
		t.Fatal(err)
	}
	if info.GoVersion != strings.TrimSpace(string(gover)) {
		t.Errorf("coily built with %s, BUILDINFO says %s", info.GoVersion, gover)
	}
}
