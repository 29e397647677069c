package folder

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

var testKey = bytes.Repeat([]byte{0xab}, 32)

func TestWriteKeyFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.key")
	want := KeyFile{Sandbox: "demo", Key: testKey, Generation: 1}
	if err := WriteKeyFile(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if wantText := `{"sandbox":"demo","key":"` + hex.EncodeToString(testKey) + `","generation":1}` + "\n"; string(data) != wantText {
		t.Fatalf("file %q, want %q", data, wantText)
	}
	got, err := ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandbox != want.Sandbox || !bytes.Equal(got.Key, want.Key) || got.Generation != want.Generation {
		t.Fatalf("read %#v", got)
	}
	// Overwriting replaces it, leaving no temporary file behind.
	want.Generation, want.Key = 2, bytes.Repeat([]byte{1}, 32)
	if err := WriteKeyFile(path, want); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadKeyFile(path); err != nil || got.Generation != 2 || !bytes.Equal(got.Key, want.Key) {
		t.Fatalf("after overwrite: %v %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the key file", len(entries))
	}
}

func TestKeyFileNeverPrintsKey(t *testing.T) {
	k := KeyFile{Sandbox: "demo", Key: testKey, Generation: 3}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		if strings.Contains(s, hex.EncodeToString(testKey)) || strings.Contains(s, "171") || !strings.Contains(s, "demo") {
			t.Fatalf("printed as %q", s)
		}
	}
}

func TestWriteKeyFileRefuses(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	good := KeyFile{Sandbox: "demo", Key: testKey, Generation: 1}
	for _, tt := range []struct {
		name, path string
		k          KeyFile
		inErr      string
	}{
		{"symlink", link, good, "symbolic link"},
		{"dangling symlink", filepath.Join(dir, "dangling.key"), good, "symbolic link"},
		{"directory", sub, good, "not a regular file"},
		{"missing dir", filepath.Join(dir, "nope", "k"), good, "no such file"},
		{"short key", filepath.Join(dir, "a"), KeyFile{Sandbox: "demo", Key: testKey[:31], Generation: 1}, "32 bytes"},
		{"bad name", filepath.Join(dir, "b"), KeyFile{Sandbox: "../x", Key: testKey, Generation: 1}, "sandbox name"},
		{"generation 0", filepath.Join(dir, "c"), KeyFile{Sandbox: "demo", Key: testKey}, "generation"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "dangling symlink" {
				if err := os.Symlink(filepath.Join(dir, "ghost"), tt.path); err != nil {
					t.Fatal(err)
				}
			}
			err := WriteKeyFile(tt.path, tt.k)
			if err == nil || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("err %v, want one saying %q", err, tt.inErr)
			}
		})
	}
	if data, _ := os.ReadFile(target); string(data) != "precious\n" {
		t.Fatalf("write went through the symlink: %q", data)
	}
	if _, err := os.Lstat(filepath.Join(dir, "ghost")); !os.IsNotExist(err) {
		t.Fatal("write created the dangling symlink's target")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
}

func TestReadKeyFileRefuses(t *testing.T) {
	hexKey := hex.EncodeToString(testKey)
	for _, tt := range []struct {
		name, content string
		mode          os.FileMode
		inErr         string
	}{
		{"mode 0644", `{"sandbox":"demo","key":"` + hexKey + `","generation":1}`, 0o644, "chmod 600"},
		{"mode 0640", `{"sandbox":"demo","key":"` + hexKey + `","generation":1}`, 0o640, "chmod 600"},
		{"mode 0602", `{"sandbox":"demo","key":"` + hexKey + `","generation":1}`, 0o602, "chmod 600"},
		{"bad hex", `{"sandbox":"demo","key":"` + strings.Repeat("zz", 32) + `","generation":1}`, 0o600, "hex"},
		{"upper-case hex", `{"sandbox":"demo","key":"` + strings.ToUpper(hexKey) + `","generation":1}`, 0o600, "lower-case hex"},
		{"short key", `{"sandbox":"demo","key":"` + hexKey[:62] + `","generation":1}`, 0o600, "32 bytes"},
		{"long key", `{"sandbox":"demo","key":"` + hexKey + `00","generation":1}`, 0o600, "32 bytes"},
		{"unknown field", `{"sandbox":"demo","key":"` + hexKey + `","generation":1,"extra":true}`, 0o600, "unknown member"},
		{"case-folded field", `{"Sandbox":"demo","key":"` + hexKey + `","generation":1}`, 0o600, "unknown member"},
		{"duplicate key", `{"sandbox":"demo","key":"` + hexKey + `","key":"` + hexKey + `","generation":1}`, 0o600, "twice"},
		{"missing generation", `{"sandbox":"demo","key":"` + hexKey + `"}`, 0o600, "missing"},
		{"generation 0", `{"sandbox":"demo","key":"` + hexKey + `","generation":0}`, 0o600, "generation"},
		{"generation string", `{"sandbox":"demo","key":"` + hexKey + `","generation":"1"}`, 0o600, "wrong type"},
		{"generation float", `{"sandbox":"demo","key":"` + hexKey + `","generation":1.5}`, 0o600, "wrong type"},
		{"bad sandbox", `{"sandbox":"Demo/..","key":"` + hexKey + `","generation":1}`, 0o600, "sandbox name"},
		{"trailing data", `{"sandbox":"demo","key":"` + hexKey + `","generation":1} {}`, 0o600, "after"},
		{"array", `[1]`, 0o600, "not a JSON object"},
		{"empty", ``, 0o600, "not a JSON object"},
		{"huge", strings.Repeat(" ", 5000), 0o600, "larger"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := ReadKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("err %v, want one saying %q", err, tt.inErr)
			}
			if strings.Contains(err.Error(), hexKey[:16]) {
				t.Fatalf("error shows the key: %v", err)
			}
		})
	}
}

func TestReadKeyFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if err := WriteKeyFile(good, KeyFile{Sandbox: "demo", Key: testKey, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	// A symbolic link to a valid key file is refused, as the writer
	// refuses to write through one.
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadKeyFile(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlink: %v, %v", k, err)
	}
	// A FIFO is refused without blocking (the test would hang).
	fifo := filepath.Join(dir, "fifo.key")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("fifo: %v", err)
	}
	if _, err := ReadKeyFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: %v", err)
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file read")
	}
}

// FuzzDecodeKeyFile: no input panics; an accepted key file re-encodes to
// one that decodes to the same key; errors never show a key's hex.
func FuzzDecodeKeyFile(f *testing.F) {
	hexKey := hex.EncodeToString(testKey)
	for _, s := range []string{
		`{"sandbox":"demo","key":"` + hexKey + `","generation":1}`,
		`{"sandbox":"demo","key":"` + hexKey + `","key":"` + hexKey + `","generation":1}`,
		`{"Sandbox":"demo","key":"` + hexKey + `","generation":1}`,
		`{"sandbox":"demo","key":"` + hexKey[:62] + `","generation":1}`,
		`{"sandbox":"demo","key":"` + hexKey + `","generation":1.5}`,
		`[1]`, ``, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := decodeKeyFile(data)
		if err != nil {
			for _, m := range keyValue.FindAllSubmatch(data, -1) {
				// A prefix that also appears outside the key's value (as
				// an unknown member's name, say) may be quoted for that.
				prefix := m[1][:16]
				if bytes.Count(data, prefix) == 1 && strings.Contains(err.Error(), string(prefix)) {
					t.Fatalf("error shows the key's value: %v", err)
				}
			}
			return
		}
		out, err := encodeKeyFile(k)
		if err != nil {
			t.Fatalf("accepted key does not encode: %v", err)
		}
		back, err := decodeKeyFile(out)
		if err != nil || back.Sandbox != k.Sandbox || !bytes.Equal(back.Key, k.Key) || back.Generation != k.Generation {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// keyValue finds the values of "key" members (16 characters or more).
var keyValue = regexp.MustCompile(`"key"\s*:\s*"([^"]{16,})"`)
