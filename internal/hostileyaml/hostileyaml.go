// Package hostileyaml makes the worst YAML inputs for a reader's costs:
// deep flow and block nesting, alias bombs, long keys and scalars, many
// small nodes, and deep nesting in an otherwise valid file with an error
// at the end. Tests feed them to every YAML reader coily has, under a
// memory ceiling (package ceiling).
package hostileyaml

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"coily.dev/coily/internal/ceiling"
)

// Case is one hostile input and the refusal a reader bounded as coily's are
// gives it (a substring of the message), "" when any refusal will do.
type Case struct {
	Name, Want string
	Data       []byte
}

// Cases returns inputs of about size bytes, each after prefix (a valid
// start of a document: block mapping members at column 0, ending in a
// newline). maxDepth and maxNodes are the reader's limits, for the
// refusals expected.
func Cases(prefix string, size, maxDepth, maxNodes int) []Case {
	n := max(size-len(prefix)-16, 1024)
	deep := fmt.Sprintf("nested more than %d deep", maxDepth)
	values := fmt.Sprintf("more than %d values", maxNodes)
	c := func(name, want, body string) Case { return Case{Name: name, Want: want, Data: []byte(prefix + body)} }
	return []Case{
		c("deep flow", deep, "x: "+strings.Repeat("[", n)),
		c("deep flow mapping", deep, "x: "+strings.Repeat("{a: ", n/4)),
		c("deep compact sequence", deep, "x:\n"+strings.Repeat("- ", n/2)+"y\n"),
		c("deep block mapping", deep, staircase(n)),
		c("alias bomb", "", laughs(20, 8)),
		c("long key", "longer than", strings.Repeat("k", n)+": v\n"),
		c("many small nodes", values, "x: ["+strings.Repeat("a,", n/2)+"a]\n"),
		c("many small nodes, unclosed", values, "x: ["+strings.Repeat("a,", n/2)+"\ny: 1\n"),
		c("many empty values", values, "x:\n"+strings.Repeat("-\n", n/2)),
		c("long scalar", "", "x: "+strings.Repeat("a", n)+"\n"),
		c("long quoted scalar, unclosed", "", "x: \""+strings.Repeat("a ", n/2)+"\n"),
		c("deep nesting in a valid file, error at the end", deep,
			"x: "+strings.Repeat("[", n/4)+strings.Repeat("]", n/4)+"\ny: [a, b]\nz: ]\n"),
	}
}

// staircase is a block mapping nested by indentation, about n bytes.
func staircase(n int) string {
	var b strings.Builder
	for i := 0; b.Len()+i+3 <= n; i++ {
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	return b.String()
}

// laughs is the billion laughs with fan-out f over l levels: the last
// member expands to f^l values.
func laughs(f, l int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "a0: &a0 [%s]\n", strings.TrimSuffix(strings.Repeat("lol, ", f), ", "))
	for i := 1; i <= l; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), f), ", "))
	}
	fmt.Fprintf(&b, "x: *a%d\n", l)
	return b.String()
}

// UnderCeiling gives each case to answer in a child process of the calling
// test (package ceiling), under a heap ceiling of limit bytes and a
// deadline d, and returns each answer by case name. A case whose child
// died or did not answer in time fails the test and has no answer. In the
// child itself, it answers the child's one case and returns nil: the test
// has nothing more to do.
func UnderCeiling(t *testing.T, cases []Case, limit uint64, d time.Duration, answer func(data []byte) string) map[string]string {
	t.Helper()
	if name, ok := ceiling.Child(t); ok {
		for _, c := range cases {
			if c.Name == name {
				ceiling.Report(answer(c.Data))
			}
		}
		return nil
	}
	got := make(map[string]string, len(cases))
	for _, c := range cases {
		a, err := ceiling.Run(t, c.Name, limit, d)
		if err != nil {
			t.Error(err)
			continue
		}
		got[c.Name] = a
	}
	return got
}

// Answer is a reader's answer to a hostile input: "accepted", the message
// of its refusal when err is one of the type target points to
// (errors.As), or what else it returned.
func Answer(err error, target any) string {
	switch {
	case err == nil:
		return "accepted"
	case !errors.As(err, target):
		return fmt.Sprintf("not refused as a %T: %T %v", target, err, err)
	}
	return reflect.ValueOf(target).Elem().Interface().(error).Error()
}
