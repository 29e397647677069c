package visible

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"coily.dev/coily/internal/visibletest"
)

func TestText(t *testing.T) {
	for _, tc := range visibletest.HostileText {
		t.Run(tc.Name, func(t *testing.T) {
			got := Text(tc.In)
			if got != tc.Want {
				t.Fatalf("Text(%q) = %q, want %q", tc.In, got, tc.Want)
			}
			visibletest.CheckVisible(t, got)
		})
	}
}

func TestArgv(t *testing.T) {
	for _, tc := range visibletest.HostileArgv {
		t.Run(tc.Name, func(t *testing.T) {
			got := Argv(tc.In)
			if got != tc.Want {
				t.Fatalf("Argv(%q) = %s, want %s", tc.In, got, tc.Want)
			}
			visibletest.CheckVisible(t, got)
			if back := visibletest.ShellSplit(t, got); !visibletest.SameArgv(back, tc.In) {
				t.Fatalf("%s reads back as %q, not %q", got, back, tc.In)
			}
		})
	}
}

// TestTermArgvReadsBackInBash checks the quoting against a real shell:
// bash reads every rendered argv back as exactly the original words.
func TestArgvReadsBackInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	for _, tc := range visibletest.HostileArgv {
		if len(tc.In) == 0 {
			continue
		}
		cmd := exec.Command(bash, "-c", `printf '%s\0' `+Argv(tc.In))
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: bash: %v", tc.Name, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if !reflect.DeepEqual(got, tc.In) {
			t.Errorf("%s: bash read %s as %q, want %q", tc.Name, Argv(tc.In), got, tc.In)
		}
	}
}

func FuzzText(f *testing.F) {
	for _, tc := range visibletest.HostileText {
		f.Add(tc.In)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		visibletest.CheckVisible(t, got)
		if again := Text(s); again != got {
			t.Fatalf("not deterministic: %q then %q", got, again)
		}
		if twice := Text(got); twice != got {
			t.Fatalf("escaped text %q escapes again to %q", got, twice)
		}
		if Clean(s) && got != s {
			t.Fatalf("clean text %q changed to %q", s, got)
		}
	})
}

func FuzzArgv(f *testing.F) {
	for _, tc := range visibletest.HostileArgv {
		a, b := "", ""
		if len(tc.In) > 0 {
			a = tc.In[len(tc.In)-1]
		}
		if len(tc.In) > 1 {
			b = tc.In[0]
		}
		f.Add(a, b)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		argv := []string{a, b, a + " " + b}
		got := Argv(argv)
		visibletest.CheckVisible(t, got)
		if again := Argv(argv); again != got {
			t.Fatalf("not deterministic: %s then %s", got, again)
		}
		if back := visibletest.ShellSplit(t, got); !visibletest.SameArgv(back, argv) {
			t.Fatalf("%s reads back as %q, not %q", got, back, argv)
		}
	})
}
