// Package policytest holds the checks of policy files shared by package
// policy's tests and those of each package that registers a rule
// section: broken files against the errors they must give (golden
// files), and a fuzz target seeded from a package's files.
package policytest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/policy"
)

// YAMLFiles lists dir's *.yaml files, sorted, but for the tests beside
// a policy (*.tests.yaml, package policycase); none fails the test.
func YAMLFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, ".tests.yaml") })
	if len(names) == 0 {
		t.Fatalf("no *.yaml files in %s", dir)
	}
	slices.Sort(names)
	return names
}

// Broken loads each of dir's *.yaml files, which must fail, the same way
// each time, with a *policy.Error naming the file, a line (unless noLine
// names the file) and a column (unless noColumn does), and the message
// of the file's .err golden file; update rewrites the golden files.
func Broken(t *testing.T, dir string, update bool, noLine, noColumn map[string]bool) {
	files := YAMLFiles(t, dir)
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			path := filepath.ToSlash(filepath.Join(dir, name))
			err := loadFails(t, path, !noLine[name], !noLine[name] && !noColumn[name])
			golden := strings.TrimSuffix(file, ".yaml") + ".err"
			if update {
				if err := os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, rerr := os.ReadFile(golden)
			if rerr != nil {
				t.Fatalf("%v (run with -update to create it)", rerr)
			}
			if got := err.Error(); got != strings.TrimSuffix(string(want), "\n") {
				t.Errorf("error mismatch\n got: %s\nwant: %s", got, want)
			}
		})
	}
	// Every golden file belongs to a broken policy.
	goldens, _ := filepath.Glob(filepath.Join(dir, "*.err"))
	for _, g := range goldens {
		if !slices.Contains(files, strings.TrimSuffix(g, ".err")+".yaml") {
			t.Errorf("%s has no matching .yaml", g)
		}
	}
}

// loadFails loads path, which must fail as Broken says, and returns the
// error.
func loadFails(t *testing.T, path string, line, column bool) error {
	t.Helper()
	p, err := policy.Load(path)
	if err == nil {
		t.Fatalf("Load(%s) succeeded with %d rules; want an error", path, len(p.Rules()))
	}
	var e *policy.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T (%v) is not a *policy.Error", err, err)
	}
	if e.File != path {
		t.Errorf("File = %q, want %q", e.File, path)
	}
	if line && e.Line <= 0 {
		t.Errorf("error has no line: %v", err)
	}
	if column && e.Column <= 0 {
		t.Errorf("error has no column: %v", err)
	}
	if !strings.HasPrefix(err.Error(), path+":") {
		t.Errorf("error %q does not start with %q", err, path+":")
	}
	// The same input always gives the same error.
	for range 20 {
		if _, again := policy.Load(path); again == nil || again.Error() != err.Error() {
			t.Fatalf("error changed between loads: %q then %v", err, again)
		}
	}
	return err
}

// Fuzz parses inputs seeded from the *.yaml files of dirs: an error is a
// *policy.Error naming the file, the same each time, with no policy;
// a policy that loads passes check.
func Fuzz(f *testing.F, dirs []string, check func(t *testing.T, p *policy.Policy)) {
	for _, dir := range dirs {
		for _, file := range YAMLFiles(f, dir) {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse("fuzz.yaml", data)
		if err == nil {
			check(t, p)
			return
		}
		var e *policy.Error
		switch {
		case !errors.As(err, &e):
			t.Fatalf("error %T (%v) is not a *policy.Error", err, err)
		case !strings.HasPrefix(err.Error(), "fuzz.yaml"):
			t.Fatalf("error %q does not start with the file name", err)
		case p != nil:
			t.Fatalf("Parse returned a policy with error %v", err)
		}
		if _, again := policy.Parse("fuzz.yaml", data); again == nil || again.Error() != err.Error() {
			t.Fatalf("error changed between parses: %q then %v", err, again)
		}
	})
}
