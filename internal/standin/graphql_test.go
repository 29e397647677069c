package standin

import (
	"strings"
	"testing"
)

var operationNameCases = []struct {
	doc, kind, name string
}{
	{"query RepositoryInfo($owner: String!) { repository(owner: $owner) { id } }", "query", "RepositoryInfo"},
	{"\n\tfragment repo on Repository { id owner { login } }\n\tquery RepositoryInfo($o: String!) { x }", "query", "RepositoryInfo"},
	{"mutation IssueCreate($input: CreateIssueInput!) { createIssue(input: $input) { issue { url } } }", "mutation", "IssueCreate"},
	{"query Issue_fields{Issue: __type(name: \"Issue\"){fields{name}}}", "query", "Issue_fields"},
	{"# a comment\nquery Named { a }", "query", "Named"},
	{"{ viewer { login } }", "query", ""},
	{"query { viewer { login } }", "query", ""},
	{"query($x: Int) { a }", "query", ""},
	{"query 9bad { a }", "query", ""},
	{"", "", ""},
	{"   \n\t ", "", ""},
	{"# only a comment", "", ""},
	{"fragment f on T { a { b", "", ""},
	{"fragment f on T { } } } query After { a }", "", ""},
	{"query", "query", ""},
	{"mutation\x00Evil { a }", "mutation", ""},
	{strings.Repeat("{", 10000), "query", ""},
	{strings.Repeat("fragment f on T { a } ", 1000) + "query Deep { a }", "query", "Deep"},
	{"subscription S { a }", "subscription", "S"},
	{"queryX { a }", "", ""},
}

func TestOperationName(t *testing.T) {
	for _, c := range operationNameCases {
		kind, name := operationName(c.doc)
		if kind != c.kind || name != c.name {
			t.Errorf("operationName(%.60q) = %q, %q; want %q, %q", c.doc, kind, name, c.kind, c.name)
		}
	}
}

func FuzzOperationName(f *testing.F) {
	for _, c := range operationNameCases {
		f.Add(c.doc)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		kind, name := operationName(doc)
		switch kind {
		case "", "query", "mutation", "subscription":
		default:
			t.Fatalf("kind %q", kind)
		}
		if name != "" && (kind == "" || !isName(name) || !strings.Contains(doc, name)) {
			t.Fatalf("name %q (kind %q) from %q", name, kind, doc)
		}
	})
}
