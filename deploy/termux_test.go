package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var termuxScripts = []string{"coily-lockout", "coily-pause", "coily-console"}

// TestTermuxScriptsSyntax: every widget script parses as sh, is
// executable, and starts with Termux's own sh (Termux:Widget runs the file
// itself, where /bin/sh does not exist).
func TestTermuxScriptsSyntax(t *testing.T) {
	for _, name := range termuxScripts {
		path := filepath.Join("termux", name)
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", path, err, out)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o111 != 0o111 {
			t.Errorf("%s: mode %v, want executable", path, fi.Mode())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(string(b), "\n"); first != "#!/data/data/com.termux/files/usr/bin/sh" {
			t.Errorf("%s: first line %q, want Termux's sh", path, first)
		}
	}
	// The example env file is what the scripts read: it must parse too.
	if out, err := exec.Command("sh", "-n", filepath.Join("termux", "phone.env")).CombinedOutput(); err != nil {
		t.Errorf("sh -n termux/phone.env: %v\n%s", err, out)
	}
}

// fakeTool writes an executable NAME into dir that records its arguments,
// one a line, in $FAKE_DIR/NAME.args, and exits with $FAKE_EXIT.
func fakeTool(t *testing.T, dir, name string) {
	t.Helper()
	script := "#!/bin/sh\n: >\"$FAKE_DIR/" + name + ".args\"\n" +
		"for a in \"$@\"; do printf '%s\\n' \"$a\" >>\"$FAKE_DIR/" + name + ".args\"; done\n" +
		"echo \"" + name + " ran\"\nexit \"${FAKE_EXIT:-0}\"\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestTermuxScripts(t *testing.T) {
	const server = "COILY_SERVER=coily.example-tailnet.ts.net\n"
	tests := []struct {
		name, script, env string
		extraEnv          []string
		tool              string   // the program the script must run
		want              []string // its arguments, or nil: it must not run
		wantExit          int
		wantStderr        string
	}{
		{name: "lockout", script: "coily-lockout", env: server, tool: "coily",
			want: []string{"--server", "coily.example-tailnet.ts.net", "lockout", "--reason", "one-tap lockout from the phone"}},
		{name: "pause", script: "coily-pause", env: server, tool: "coily",
			want: []string{"--server", "coily.example-tailnet.ts.net", "pause", "--reason", "paused from the phone"}},
		{name: "lockout with a port", script: "coily-lockout", env: "COILY_SERVER=100.101.102.103:7443\n", tool: "coily",
			want: []string{"--server", "100.101.102.103:7443", "lockout", "--reason", "one-tap lockout from the phone"}},
		{name: "the example env file", script: "coily-lockout", env: "@example", tool: "coily",
			want: []string{"--server", "coily.example-tailnet.ts.net", "lockout", "--reason", "one-tap lockout from the phone"}},
		{name: "another client binary", script: "coily-pause", env: server + "COILY_BIN=coily-client\n", tool: "coily-client",
			want: []string{"--server", "coily.example-tailnet.ts.net", "pause", "--reason", "paused from the phone"}},
		{name: "refused: its exit code", script: "coily-lockout", env: server, tool: "coily", extraEnv: []string{"FAKE_EXIT=125"},
			want: []string{"--server", "coily.example-tailnet.ts.net", "lockout", "--reason", "one-tap lockout from the phone"}, wantExit: 125},
		{name: "server unreachable: its exit code", script: "coily-pause", env: server, tool: "coily", extraEnv: []string{"FAKE_EXIT=69"},
			want: []string{"--server", "coily.example-tailnet.ts.net", "pause", "--reason", "paused from the phone"}, wantExit: 69},
		{name: "a hostile server value stays one argument", script: "coily-lockout", tool: "coily",
			env:  "COILY_SERVER='coily; touch $FAKE_DIR/pwned $(touch $FAKE_DIR/pwned2)'\n",
			want: []string{"--server", "coily; touch $FAKE_DIR/pwned $(touch $FAKE_DIR/pwned2)", "lockout", "--reason", "one-tap lockout from the phone"}},
		{name: "no env file", script: "coily-lockout", env: "", tool: "coily", wantExit: 78, wantStderr: "phone.env"},
		{name: "no server", script: "coily-lockout", env: "# nothing\n", tool: "coily", wantExit: 78, wantStderr: "sets no COILY_SERVER"},
		{name: "pause: no server", script: "coily-pause", env: "COILY_SERVER=\n", tool: "coily", wantExit: 78, wantStderr: "sets no COILY_SERVER"},
		{name: "console URL", script: "coily-console", env: server + "COILY_CONSOLE_URL=https://coily.example-tailnet.ts.net/approvals\n",
			tool: "termux-open-url", want: []string{"https://coily.example-tailnet.ts.net/approvals"}},
		{name: "console from the server name", script: "coily-console", env: server,
			tool: "termux-open-url", want: []string{"https://coily.example-tailnet.ts.net/"}},
		{name: "console: the gRPC port dropped", script: "coily-console", env: "COILY_SERVER=coily.example-tailnet.ts.net:7443\n",
			tool: "termux-open-url", want: []string{"https://coily.example-tailnet.ts.net/"}},
		{name: "console: an IPv6 address with a port", script: "coily-console", env: "COILY_SERVER=[fd7a:115c:a1e0::1]:7443\n",
			tool: "termux-open-url", want: []string{"https://[fd7a:115c:a1e0::1]/"}},
		{name: "console: a bare IPv6 address", script: "coily-console", env: "COILY_SERVER=fd7a:115c:a1e0::1\n",
			tool: "termux-open-url", want: []string{"https://[fd7a:115c:a1e0::1]/"}},
		{name: "console: an IPv6 address in brackets", script: "coily-console", env: "COILY_SERVER=[fd7a:115c:a1e0::1]\n",
			tool: "termux-open-url", want: []string{"https://[fd7a:115c:a1e0::1]/"}},
		{name: "console over HTTP", script: "coily-console", env: server + "COILY_CONSOLE_SCHEME=http\n",
			tool: "termux-open-url", want: []string{"http://coily.example-tailnet.ts.net/"}},
		{name: "console over HTTP, from the environment", script: "coily-console", env: "COILY_SERVER=coily:7443\n",
			extraEnv: []string{"COILY_CONSOLE_SCHEME=http"}, tool: "termux-open-url", want: []string{"http://coily/"}},
		{name: "console: the URL wins over the scheme", script: "coily-console",
			env:  server + "COILY_CONSOLE_SCHEME=http\nCOILY_CONSOLE_URL=https://console.example/\n",
			tool: "termux-open-url", want: []string{"https://console.example/"}},
		{name: "console: another scheme refused", script: "coily-console", env: server + "COILY_CONSOLE_SCHEME=javascript\n",
			tool: "termux-open-url", wantExit: 78, wantStderr: "must be https or http"},
		{name: "console: a scheme with a host refused", script: "coily-console", env: server + "COILY_CONSOLE_SCHEME='https://evil.example/#'\n",
			tool: "termux-open-url", wantExit: 78, wantStderr: "must be https or http"},
		{name: "console: nothing set", script: "coily-console", env: "#\n", tool: "termux-open-url", wantExit: 78, wantStderr: "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, home := filepath.Join(dir, "bin"), filepath.Join(dir, "home")
			for _, d := range []string{bin, filepath.Join(home, ".config", "coily")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, tool := range []string{"coily", "coily-client", "termux-open-url"} {
				fakeTool(t, bin, tool)
			}
			switch tt.env {
			case "":
			case "@example":
				b, err := os.ReadFile(filepath.Join("termux", "phone.env"))
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(home, ".config", "coily", "phone.env"), string(b))
			default:
				writeFile(t, filepath.Join(home, ".config", "coily", "phone.env"), tt.env)
			}
			cmd := exec.Command("sh", filepath.Join("termux", tt.script))
			cmd.Env = append([]string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + home, "FAKE_DIR=" + dir}, tt.extraEnv...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantExit {
				t.Errorf("exit %d, want %d; stderr: %s", code, tt.wantExit, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q, want it to say %q", stderr.String(), tt.wantStderr)
			}
			for _, tool := range []string{"coily", "coily-client", "termux-open-url"} {
				b, err := os.ReadFile(filepath.Join(dir, tool+".args"))
				ran := err == nil
				if tool != tt.tool || tt.want == nil {
					if ran {
						t.Errorf("%s ran (%q), want it not to", tool, b)
					}
					continue
				}
				if !ran {
					t.Fatalf("%s did not run; stderr: %s", tool, stderr.String())
				}
				got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
				if !slices.Equal(got, tt.want) {
					t.Errorf("%s got arguments %q, want %q", tool, got, tt.want)
				}
			}
			for _, f := range []string{"pwned", "pwned2"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("the env file's value ran a command (%s exists)", f)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
