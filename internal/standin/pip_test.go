package standin

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPipIndexPipInstall(t *testing.T) {
	py := Python(t)
	start := time.Now()
	p := PipIndex(t, PipOptions{Wheels: []Wheel{
		{Name: "Standin.App", Version: "2.0", Requires: []string{"standin_lib>=1.0"}},
		{Name: "standin-lib", Version: "1.0"},
		{Name: "standin-lib", Version: "1.1"},
	}})
	since(t, "PipIndex", start)
	target := filepath.Join(t.TempDir(), "site")
	env := append(p.Env(), "HOME="+t.TempDir())

	run(t, "", env, py, p.InstallArgs(target, "standin-app")...)
	out := run(t, "", append(env, "PYTHONPATH="+target), py, "-c",
		"import standin_app, standin_lib; print(standin_app.NAME, standin_app.VERSION, standin_lib.VERSION)")
	if got, want := strings.TrimSpace(out), "Standin.App 2.0 1.1"; got != want {
		t.Fatalf("imported %q, want %q (the dependency at its newest version)", got, want)
	}
	if out, err := tryRun(t, "", env, py, p.InstallArgs(filepath.Join(t.TempDir(), "x"), "no-such-pkg")...); err == nil {
		t.Fatalf("pip installed a package the index does not have:\n%s", out)
	}
	t.Logf("requests: %q", p.Requests())
}

func TestWheelRecordMatchesContents(t *testing.T) {
	w := Wheel{Name: "My_Pkg", Version: "0.3", Files: map[string]string{"my_pkg/__init__.py": "X = 1\n", "my_pkg/data.txt": ""}}
	if got := w.Filename(); got != "my_pkg-0.3-py3-none-any.whl" {
		t.Errorf("Filename = %q", got)
	}
	b, err := w.Build()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	contents := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(rc)
		rc.Close()
		contents[f.Name] = string(c)
	}
	record, ok := contents["my_pkg-0.3.dist-info/RECORD"]
	if !ok {
		t.Fatalf("no RECORD in %v", contents)
	}
	lines := strings.Split(strings.TrimSpace(record), "\n")
	if len(lines) != len(contents) {
		t.Fatalf("RECORD has %d lines for %d files:\n%s", len(lines), len(contents), record)
	}
	for _, line := range lines {
		parts := strings.Split(line, ",")
		name, c := parts[0], contents[parts[0]]
		if strings.HasSuffix(name, "/RECORD") {
			continue
		}
		sum := sha256.Sum256([]byte(c))
		if want := fmt.Sprintf("%s,sha256=%s,%d", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(c)); line != want {
			t.Errorf("RECORD line %q, want %q", line, want)
		}
	}
	if !strings.Contains(contents["my_pkg-0.3.dist-info/METADATA"], "Name: My_Pkg\nVersion: 0.3\n") {
		t.Errorf("METADATA = %q", contents["my_pkg-0.3.dist-info/METADATA"])
	}
	for _, bad := range []Wheel{{Name: "", Version: "1"}, {Name: "x", Version: ""}, {Name: "x", Version: "1-2"}, {Name: "x", Version: "../1"}} {
		if _, err := bad.Build(); err == nil {
			t.Errorf("Build(%+v) succeeded", bad)
		}
	}
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"Standin.App": "standin-app", "a__b--c..d": "a-b-c-d", "ABC": "abc", "-x-": "-x-", "": "",
	} {
		if got := normalizeName(in); got != want {
			t.Errorf("normalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}
