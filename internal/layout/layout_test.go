package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "coily.dev/coily"

// pkg is what `go list -json` says of one package, as far as these checks
// read it.
type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// packages lists every package of the module, with the development build's
// tag so that coily dev's files are included.
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "coilydev", "-json", module+"/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: run from the module", len(pkgs))
	}
	return pkgs
}

// root is the module's directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", dir)
	}
	return dir
}

// mayImportServer are the packages that may link the server: the binaries,
// and the test helper that starts a whole server for other packages' tests.
func mayImportServer(path string) bool {
	return strings.HasPrefix(path, module+"/cmd/") || path == module+"/internal/testserver"
}

// TestOnlyBinariesImportTheServer: the server is the top of the house; every
// concern it drives (access, stops, relay, attachments, the console…) is a
// package below it, so nothing but the binaries (and the test helper that
// starts one) imports it. Go refuses import cycles itself.
func TestOnlyBinariesImportTheServer(t *testing.T) {
	for _, p := range packages(t) {
		if mayImportServer(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if imp == module+"/server" {
				t.Errorf("%s imports the server", p.ImportPath)
			}
		}
	}
}

// serverLines is the bound of the server package's code (tests aside): it
// keeps the gRPC and HTTP handlers and the pipeline's order; each concern
// they call lives in its own package.
const serverLines = 2500

func TestServerStaysSmall(t *testing.T) {
	for _, p := range packages(t) {
		if p.ImportPath != module+"/server" {
			continue
		}
		n := 0
		for _, f := range p.GoFiles {
			n += countLines(t, filepath.Join(p.Dir, f))
		}
		if n >= serverLines {
			t.Errorf("server/ has %d lines of code (tests aside), the bound is %d: move a concern into its own package", n, serverLines)
		}
		t.Logf("server/: %d lines of code in %d files", n, len(p.GoFiles))
		return
	}
	t.Fatal("no server package")
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	return n
}

// outside matches a citation of a file outside the repository: the
// original design notes or the workplace's shared folder.
var outside = regexp.MustCompile(`DESIGN\.md|DESIGN §|\.\./shared/|shared/notes/`)

// TestNothingCitesOutsideTheRepository: the project's design lives in
// docs/; code, docs and scripts never send a reader to a file the
// repository does not hold.
func TestNothingCitesOutsideTheRepository(t *testing.T) {
	top := root(t)
	self, _ := filepath.Abs("layout_test.go")
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != top && (strings.HasPrefix(name, ".") && name != ".ci" || name == "bin" || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".sh", ".yaml", ".yml", ".proto", ".toml":
		default:
			if filepath.Base(filepath.Dir(path)) != ".ci" {
				return nil
			}
		}
		if path == self {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if outside.MatchString(line) {
				rel, _ := filepath.Rel(top, path)
				t.Errorf("%s:%d cites a file outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sectionKeys are the rule sections attach packages own.
var sectionKeys = regexp.MustCompile(`\b(github_app|git_credentials|ssh_keys)\b`)

// gitRemoteKeys are the files of package policy that may name github_app:
// the git section's, where it is a key of a git remote (the git proxy
// mints its tokens), not the rule section attach/githubapp reads.
var gitRemoteKeys = []string{"git.go", "gitapp.go"}

// TestSectionsLiveWithTheirAttachments: a rule section an attach package
// acts on is read there too (policy.RegisterSection), so package policy
// imports no attach package and names none of their keys in its code
// (a git remote's github_app aside: gitRemoteKeys).
func TestSectionsLiveWithTheirAttachments(t *testing.T) {
	for _, p := range packages(t) {
		if p.ImportPath != module+"/policy" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/attach") {
				t.Errorf("policy imports %s", imp)
			}
		}
		for _, f := range p.GoFiles {
			data, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(gitRemoteKeys, f) {
				data = bytes.ReplaceAll(data, []byte("github_app"), nil)
			}
			if k := sectionKeys.Find(data); k != nil {
				t.Errorf("policy/%s names the section %s, which its attach package reads", f, k)
			}
		}
		return
	}
	t.Fatal("go list found no policy package")
}

// TestBinariesLinkNoEtcdServer: the embedded etcd server is for tests only
// (internal/etcdtest); coily speaks to etcd as a client. Linking the server
// would add raft, its storage and its listeners to every binary.
func TestBinariesLinkNoEtcdServer(t *testing.T) {
	for _, tags := range []string{"", "coilydev"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-deps", "./cmd/...")
		cmd.Dir = root(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps (tags %q): %v", tags, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, module+"/cmd/coily") {
			t.Fatalf("go list -deps (tags %q) does not list cmd/coily", tags)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "go.etcd.io/etcd/server/") || d == module+"/internal/etcdtest" {
				t.Errorf("a binary links %s (tags %q)", d, tags)
			}
		}
	}
}
