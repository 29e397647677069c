package passenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coilyv1 "coily.dev/coily/proto/coily/v1"
)

type lister struct {
	calls int
	resp  *coilyv1.ListCommandsResponse
}

func (l *lister) ListCommands(context.Context, *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error) {
	l.calls++
	return l.resp, nil
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Only the names a rule for the command lists are offered, by command
// name or binary; a name no server would take is never kept.
func TestOffer(t *testing.T) {
	n := FromRules("p1", []*coilyv1.CommandRule{
		{Command: "git", Binary: "/usr/bin/git", PassEnv: []string{"GIT_AUTHOR_NAME", "A=B", "", "X\x00", strings.Repeat("A", 200)}},
		{Command: "git", Binary: "/usr/bin/git", PassEnv: []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"}},
		{Command: "gh", Binary: "/usr/bin/gh"},
	})
	vars := env(map[string]string{"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "", "SECRET": "s", "A": "x"})
	for _, tc := range []struct {
		argv0 string
		want  string
	}{{"git", "map[GIT_AUTHOR_NAME:a]"}, {"/usr/bin/git", "map[GIT_AUTHOR_NAME:a]"}, {"gh", "map[]"}, {"/bin/git", "map[]"}, {"", "map[]"}} {
		if got := fmtMap(n.Offer(tc.argv0, vars)); got != tc.want {
			t.Errorf("Offer(%q) = %s, want %s", tc.argv0, got, tc.want)
		}
	}
	if got := (*Names)(nil).Offer("git", vars); got != nil {
		t.Errorf("nil names offered %v", got)
	}
}

func fmtMap(m map[string]string) string {
	if len(m) == 0 {
		return "map[]"
	}
	var b strings.Builder
	b.WriteString("map[")
	for k, v := range m {
		b.WriteString(k + ":" + v)
	}
	return b.String() + "]"
}

// The names are asked for once, kept, and asked for again only when a
// command ran under another policy.
func TestPrepareAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coily", "pass-env.json")
	l := &lister{resp: &coilyv1.ListCommandsResponse{PolicySha256: "p1",
		Commands: []*coilyv1.CommandRule{{Command: "git", PassEnv: []string{"GIT_AUTHOR_NAME"}}}}}
	ctx := context.Background()
	n := Prepare(ctx, l, path)
	if l.calls != 1 || n.Policy != "p1" {
		t.Fatalf("first Prepare: %d calls, %+v", l.calls, n)
	}
	n = Prepare(ctx, l, path)
	After(ctx, l, path, n, "p1")
	After(ctx, l, path, n, "")
	if l.calls != 1 || len(n.Commands["git"]) != 1 {
		t.Fatalf("kept names: %d calls, %+v", l.calls, n)
	}
	l.resp = &coilyv1.ListCommandsResponse{PolicySha256: "p2"}
	After(ctx, l, path, n, "p2")
	if n := Load(path); l.calls != 2 || n == nil || n.Policy != "p2" || len(n.Commands) != 0 {
		t.Fatalf("after a policy change: %d calls, %+v", l.calls, n)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
}

// A cache file that is not what the client wrote (too large, not JSON,
// a directory, a FIFO) is no cache: the names are asked for again.
func TestLoadHostile(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"huge":    `{"policy_sha256":"` + strings.Repeat("x", maxFile) + `"}`,
		"garbage": "\x00\xff{",
		"array":   `[1,2]`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if n := Load(p); n != nil {
			t.Errorf("%s: loaded %+v", name, n)
		}
	}
	if n := Load(dir); n != nil {
		t.Errorf("a directory: loaded %+v", n)
	}
	// A FIFO at the cache's name (no writer ever comes) is passed over at
	// once: the shim must not hang on its own cache.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Names, 1)
	go func() { done <- Load(fifo) }()
	select {
	case n := <-done:
		if n != nil {
			t.Errorf("a FIFO: loaded %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}
	if n := Load(""); n != nil {
		t.Errorf("no path: loaded %+v", n)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"policy_sha256":"p","commands":{"git":["GIT_AUTHOR_NAME","LD_PRELOAD","A=B"]}}`))
	f.Add([]byte(`{"commands":{"":[""]}}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		n := Load(p)
		for name := range n.Offer("git", func(string) string { return "v" }) {
			if !namePattern.MatchString(name) {
				t.Fatalf("offered %q", name)
			}
		}
	})
}
