package audit

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// eventLiterals find the events the code writes: the forms records are
// made in across the module.
var eventLiterals = []*regexp.Regexp{
	regexp.MustCompile(`auditRecord\("([a-z.]+)"\)`),
	regexp.MustCompile(`CallerRecord\([^,()]+, [^,()]+(?:\([^()]*\))?[^,()]*, "([a-z.]+)"`),
	regexp.MustCompile(`refuseControl\(ctx, \w+, "([a-z.]+)"`),
	regexp.MustCompile(`\.record\(rq, "([a-z.]+)"`),
	regexp.MustCompile(`Event: +"([a-z.]+)"`),
	regexp.MustCompile(`(?m)^\s*(?:const )?\w*(?:Event|event)\w* *= *"([a-z.]+)"`),
	regexp.MustCompile(`controlMethods = map\[string\]string\{([^}]*)\}`),
}

// TestKindsAreEveryEvent: every event the code writes a record with is
// one of Kinds (the console's test renders each kind), and every kind is
// written somewhere.
func TestKindsAreEveryEvent(t *testing.T) {
	found := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "notify" || d.Name() == "standin" || strings.HasPrefix(d.Name(), ".")) && path != "..":
			return filepath.SkipDir // notify's events are messages', not records'
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, re := range eventLiterals {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				for _, q := range regexp.MustCompile(`"([a-z.]+)":`).FindAllStringSubmatch(m[1], -1) {
					found[q[1]] = path // the control methods' map: its keys
				}
				if !strings.Contains(m[1], `"`) {
					found[m[1]] = path
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for ev, path := range found {
		if !slices.Contains(Kinds, ev) {
			t.Errorf("%s writes records of event %q, which is not one of audit.Kinds", path, ev)
		}
	}
	for _, k := range Kinds {
		if _, ok := found[k]; !ok {
			t.Errorf("audit.Kinds lists %q, which no code writes (or this test no longer finds how)", k)
		}
	}
}
