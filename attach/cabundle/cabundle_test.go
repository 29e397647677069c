package cabundle

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coily.dev/coily/attach"
	"coily.dev/coily/refusal"
	"coily.dev/coily/sandbox"
)

const testCA = `-----BEGIN CERTIFICATE-----
MIIBfzCCASWgAwIBAgIUQnoQ3E2xqk0i7p5J4o9pQ9e2JgAwCgYIKoZIzj0EAwIw
-----END CERTIFICATE-----
`

const testKey = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"

// prepare readies the bundle of path for a run in scratch and returns its
// copy.
func prepare(path, scratch string) (*Bundle, *attach.Run, error) {
	b := New("r", path)
	run := &attach.Run{Scratch: scratch, ScratchPrefix: "coily-exec-"}
	return b, run, b.Prepare(context.Background(), run)
}

func TestCheckCAFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.pem", "# a bundle\n"+testCA+"\n"+testCA)
	if err := os.Symlink(good, filepath.Join(dir, "link.pem")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, err string
	}{
		{"bundle", good, ""},
		{"link to a bundle", filepath.Join(dir, "link.pem"), ""},
		{"key", write("key.pem", testCA+testKey), `type "PRIVATE KEY"`},
		{"not PEM", write("shadow", "root:$6$salt$hash:19000:0:99999:7:::\n"), "no PEM certificate"},
		{"empty", write("empty.pem", ""), "no PEM certificate"},
		{"broken block", write("broken.pem", testCA+"-----BEGIN CERTIFICATE-----\nnot base64!\n"), "malformed"},
		{"directory", dir, "not a regular file"},
		{"missing", filepath.Join(dir, "nope.pem"), "no such file"},
		{"too big", write("big.pem", testCA+strings.Repeat("#\n", MaxSize/2)), "larger than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			scratch := t.TempDir()
			b, run, err := prepare(c.path, scratch)
			f := b.copy
			t.Cleanup(func() { b.Close(context.Background(), &attach.End{}) })
			switch {
			case c.err == "" && (err != nil || f == nil):
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || f != nil):
				t.Fatal("accepted")
			case c.err != "" && (refusal.As(err).Code != refusal.SandboxUnavailable || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want %q", err, c.err)
			case c.err != "":
				if len(run.Binds) != 0 || len(run.Env) != 0 {
					t.Fatalf("a refused bundle gave the command %v %v", run.Binds, run.Env)
				}
				return
			}
			// What the sandbox binds is a copy of what was checked, in the
			// scratch directory, readable by any user (the original is
			// 0600): a root server's sandbox user reads it.
			fi, err := f.Stat()
			if err != nil || fi.Mode().Perm() != 0o444 || filepath.Dir(f.Name()) != scratch ||
				!strings.HasPrefix(filepath.Base(f.Name()), "coily-exec-ca-") {
				t.Fatalf("copy %s: %v %v", f.Name(), fi.Mode(), err)
			}
			if orig, _ := os.Stat(good); os.SameFile(orig, fi) {
				t.Fatal("the original is bound, not a copy")
			}
			got, _ := io.ReadAll(f)
			if want, _ := os.ReadFile(good); string(got) != string(want) {
				t.Fatalf("copy differs: %q", got)
			}
			if len(run.Binds) != 1 || run.Binds[0] != (sandbox.Bind{At: sandbox.CAPath, File: f}) {
				t.Fatalf("binds %v", run.Binds)
			}
			for _, k := range sandbox.CAEnv {
				if run.Env[k] != sandbox.CAPath {
					t.Errorf("%s = %q, want %s", k, run.Env[k], sandbox.CAPath)
				}
			}
			b.Close(context.Background(), &attach.End{})
			if _, err := os.Stat(f.Name()); !os.IsNotExist(err) {
				t.Fatalf("the copy outlived Close: %v", err)
			}
		})
	}
	if b := New("r", ""); b != nil {
		t.Fatalf("no ca_file: %v", b)
	}
}

// A FIFO in place of a rule's ca_file (in a workspace, by a command) is
// refused at once: the exec is never left waiting for a writer.
func TestCAFileFIFONeverBlocks(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(ca, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		b, _, err := prepare(ca, dir)
		b.Close(context.Background(), &attach.End{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "regular") {
			t.Fatalf("Prepare(FIFO) = %v, want a refusal of what is not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prepare blocked on a FIFO")
	}
}

// CheckPEM accepts certificates and text between them, nothing else.
func TestCheckPEM(t *testing.T) {
	for _, c := range []struct {
		name, data string
		ok         bool
	}{
		{"one", testCA, true},
		{"two with text", "# roots\n" + testCA + "between\n" + testCA + "after\n", true},
		{"empty", "", false},
		{"text only", "no certificates here\n", false},
		{"a key after", testCA + testKey, false},
		{"a key only", testKey, false},
		{"unterminated", testCA + "-----BEGIN CERTIFICATE-----\nAAAA\n", false},
		{"begin in text", testCA + "x -----BEGIN junk\n", false},
		{"binary before, same line", "\x00\xff" + testCA, false},
		{"binary line before", "\x00\xff\n" + testCA, true},
	} {
		if err := CheckPEM([]byte(c.data)); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// FuzzCheckPEM: whatever passes holds a certificate and no other block.
func FuzzCheckPEM(f *testing.F) {
	for _, s := range []string{testCA, testCA + testKey, "", "-----BEGIN", testCA + "-----BEGIN CERTIFICATE-----\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if CheckPEM(data) != nil {
			return
		}
		if !strings.Contains(string(data), "-----BEGIN CERTIFICATE-----") {
			t.Fatalf("accepted without a certificate: %q", data)
		}
	})
}
