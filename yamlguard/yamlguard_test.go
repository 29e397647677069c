package yamlguard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var testLimits = Limits{MaxBytes: 2 << 20, MaxDepth: 8, MaxNodes: 1000, MaxAliases: 4, MaxKeyLen: 1024}

// hostile are the worst cases of each kind, and what Check says of them.
func hostile() []struct {
	name, in  string
	line, col int
	msg       string
} {
	deepBlock := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Repeat(" ", i) + "a:\n")
		}
		return b.String()
	}
	return []struct {
		name, in  string
		line, col int
		msg       string
	}{
		{"deep flow", strings.Repeat("[", 30000), 1, 9, "nested more than 8 deep"},
		{"deep flow mapping", strings.Repeat("{a: ", 30000), 1, 33, "nested more than 8 deep"},
		{"deep flow after a valid start", "a: 1\nb: [x, y]\nc: " + strings.Repeat("[", 100), 3, 11, "nested more than 8 deep"},
		{"deep compact sequence", strings.Repeat("- ", 30000) + "x\n", 1, 17, "nested more than 8 deep"},
		{"deep block mapping", deepBlock(100), 9, 9, "nested more than 8 deep"},
		{"deep block and flow", "a:\n  b:\n    c: [[[[[[[x]]]]]]]\n", 3, 13, "nested more than 8 deep"},
		{"many small nodes", "[" + strings.Repeat("a,", 2000) + "a]", 1, 2000, "more than 1000 values"},
		{"many empty values", strings.Repeat("-\n", 2000), 1001, 1, "more than 1000 values"},
		{"many empty keys", strings.Repeat("? \n", 2000), 1001, 1, "more than 1000 values"},
		{"many null values", "{" + strings.Repeat("a,", 2000) + "}", 1, 2000, "more than 1000 values"},
		{"many keys without values", strings.Repeat("k:\n", 2000), 1000, 1, "more than 1000 values"},
		{"alias bomb", "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n", 4, 5, "more than 4 aliases"},
		{"long plain key", strings.Repeat("k", 1025) + ": v\n", 1, 1, "a mapping key longer than 1024 characters"},
		{"long quoted key in a flow mapping", "{\"" + strings.Repeat("k", 2000) + "\": v}", 1, 2, "a mapping key longer than 1024 characters"},
		{"deep nesting in a valid file with an error at the end", "a: " + strings.Repeat("[", 50) + strings.Repeat("]", 50) + "\nb: ]\n", 1, 11, "nested more than 8 deep"},
		{"too large", strings.Repeat("a", 2<<20+1), 0, 0, "larger than 2097152 bytes"},
	}
}

func TestCheckHostile(t *testing.T) {
	for _, c := range hostile() {
		start := time.Now()
		err := Check([]byte(c.in), testLimits)
		var e *Error
		if !errors.As(err, &e) || e.Line != c.line || e.Column != c.col || e.Msg != c.msg {
			t.Errorf("%s: %v; want %d:%d %q", c.name, err, c.line, c.col, c.msg)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v", c.name, d)
		}
	}
}

// Within the limits, nothing is refused; brackets, dashes and colons in
// scalars and comments are not structure.
func TestCheckAccepts(t *testing.T) {
	for _, in := range []string{
		"",
		"a: 1\n",
		"key: " + strings.Repeat("k", 1020) + "\n",
		strings.Repeat("k", 1024) + ": v\n",
		"a: '[[[[[[[[[[[['\nb: \"{{{{{{{{{{{{\\\"[[[[[[[[[\"\n",
		"a: x[[[[[[[[[[[[ # [[[[[[[[[[[\n",
		"a: |\n  [[[[[[[[[[[[\n  - - - - - - - - - -\n\n  {{{{{{{{{{\nb: >-\n   [[[[[[[[[[[[[\n",
		"a: plain text\n  running on [[[[[[[[[[[[[\n  over lines\n",
		"# [[[[[[[[[[[[[[[[[\na: 1\n",
		"a: ['it''s [[[[[[[[[[[[', \"\\\\\"]\n",
		"a: x\n---\nb: [[[[[[[]]]]]]]\n",
		"-\n- a\n- b: c\n  d: [1, 2]\n",
		"version: 1\ncommands:\n- name: x\n  args: [\"--a=[\", '{']\n",
		"a: b:c[[[[[[[[[[[[[[\n",
		"k: !tag x\nl: &anchor y\n",
	} {
		if err := Check([]byte(in), testLimits); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
	if err := Check([]byte("a: 1"), Limits{MaxBytes: 10}); err == nil {
		t.Error("limits not set, yet accepted")
	}
}

// readerCounts is what go.yaml.in/yaml/v3 builds from data: the deepest
// nesting and the nodes of every document (aliases not expanded).
func readerCounts(data []byte) (depth, nodes int, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return depth, nodes, true
		}
		if err != nil {
			return 0, 0, false
		}
		for _, n := range doc.Content {
			d, c := tree(n)
			depth, nodes = max(depth, d), nodes+c
		}
	}
}

func tree(n *yaml.Node) (depth, nodes int) {
	nodes = 1
	for _, c := range n.Content {
		d, k := tree(c)
		depth, nodes = max(depth, d), nodes+k
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		depth++
	}
	return depth, nodes
}

// agrees checks the guard's counts against the reader's: never more, and
// the reader never builds more than about twice as much.
func agrees(t *testing.T, name string, data []byte, exact bool) {
	t.Helper()
	depth, nodes, ok := readerCounts(data)
	if !ok {
		return
	}
	gd, gn, _ := counts(data)
	if depth > 2*gd+1 || nodes > 2*gn+2 {
		t.Fatalf("%s: the reader built depth %d and %d nodes, the guard counted %d and %d\n%q", name, depth, nodes, gd, gn, data)
	}
	if exact && (gd > depth || gn > nodes) {
		t.Errorf("%s: the guard counted depth %d and %d nodes, the reader built %d and %d", name, gd, gn, depth, nodes)
	}
}

// Every YAML file in the repository: the guard never counts more than the
// reader builds (so it never refuses a file the reader takes).
func TestCountsAgreeOnRepositoryFiles(t *testing.T) {
	seen := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); d.IsDir() || (ext != ".yaml" && ext != ".yml") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		agrees(t, path, data, true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("only %d YAML files found", seen)
	}
}

func TestCountsAgreeOnCases(t *testing.T) {
	for _, in := range []string{
		"a: 1\n", "a:\nb:\n", "a:\n- x\n- y\nb: z\n", "a:\n  b:\nc: d\n", "-\n-\n", "? a\n? b\n",
		"{a, b: c}", "[a, [b, {c: d}]]", "a: |\n  x\n b\n", "- - - x\n  - y\n", "a: &x [1]\nb: *x\n",
		"a: b\n---\nc: d\n", "'a': \"b\"\n", "? |\n  k\n: v\n",
	} {
		agrees(t, in, []byte(in), true)
	}
}

// Random inputs of YAML's indicators, quotes, breaks and escapes: the
// guard's counts agree with the reader's both ways on every one the reader
// takes. (A deterministic stand-in for long fuzzing.)
func TestCountsAgreeOnRandomInputs(t *testing.T) {
	alpha := []byte("aab  -:?,[]{}#&*!|>'\"\\\n\n\r\t.%1+<\xc2\x85")
	r := rand.New(rand.NewSource(1))
	for range 50000 {
		b := make([]byte, r.Intn(40))
		for i := range b {
			b[i] = alpha[r.Intn(len(alpha))]
		}
		agrees(t, "input", b, true)
	}
}

// FuzzCheck: never panics, never slow, and the reader never builds more
// than about twice what the guard counted.
func FuzzCheck(f *testing.F) {
	for _, c := range hostile() {
		if len(c.in) <= 4<<10 {
			f.Add([]byte(c.in))
		}
	}
	f.Add([]byte("a:\n- x\n- y\nb: z\n"))
	f.Add([]byte("a: |\n  x\n b\n"))
	f.Add([]byte("{a, b: c, [d]: e}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		_ = Check(data, testLimits)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("took %v", d)
		}
		agrees(t, "input", data, false)
	})
}

func TestCheckExpanded(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", "line 3:4: more than 30 values with aliases expanded"},
		{"a: &a [1, *a]\n", "line 1:11: an alias inside its own anchor"},
		{"a: &a [x, x]\nb: [*a, *a]\n", ""},
	} {
		var root yaml.Node
		if err := yaml.Unmarshal([]byte(c.in), &root); err != nil {
			t.Fatal(err)
		}
		err := CheckExpanded(&root, 30)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%q: %v; want %q", c.in, err, c.want)
		}
	}
}

// A request's worth of YAML: the scan costs next to nothing beside the
// reader's parse of the same bytes.
const benchDoc = `version: 1
id: 0f8fad5b-d9cb-469f-a165-70867728950e
created_at: 2026-01-02T03:04:05Z
nonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19
sandbox: agent-1
argv: [git, status, --short]
cwd: src
env: {LANG: C.UTF-8, GIT_PAGER: cat}
stdin: "hello\n"
timeout: 60
requires_confirm: false
note: check the tree
hmac: abababababababababababababababababababababababababababababababab
`

func BenchmarkCheck(b *testing.B) {
	data := []byte(benchDoc)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Check(data, testLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReader(b *testing.B) {
	data := []byte(benchDoc)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var n yaml.Node
		if err := yaml.Unmarshal(data, &n); err != nil {
			b.Fatal(err)
		}
	}
}
