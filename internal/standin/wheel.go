package standin

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Wheel describes a pure-Python wheel (py3-none-any) built in Go.
type Wheel struct {
	Name    string // distribution name, e.g. "standin-pkg"
	Version string // e.g. "1.0"
	// Files maps paths inside the wheel to their content. Empty means one
	// module: <name with "_" for "-">/__init__.py holding NAME and VERSION.
	Files map[string]string
	// Requires are Requires-Dist lines, e.g. "other-pkg>=1.0".
	Requires []string
}

// Filename returns the wheel's file name, e.g.
// "standin_pkg-1.0-py3-none-any.whl".
func (w Wheel) Filename() string {
	return w.distName() + "-" + w.Version + "-py3-none-any.whl"
}

// Module returns the import name of the default module.
func (w Wheel) Module() string {
	return strings.ReplaceAll(normalizeName(w.Name), "-", "_")
}

// distName is the escaped name used in file names (PEP 427).
func (w Wheel) distName() string {
	return strings.ReplaceAll(normalizeName(w.Name), "-", "_")
}

// Build returns the wheel's bytes: its files, then the dist-info METADATA,
// WHEEL and RECORD (with the sha256 and size of every other file).
func (w Wheel) Build() ([]byte, error) {
	if normalizeName(w.Name) == "" || w.Version == "" || strings.ContainsAny(w.Version, "-/ \n") {
		return nil, fmt.Errorf("wheel name %q version %q: want a name and a version without '-', '/' or space", w.Name, w.Version)
	}
	files := w.Files
	if len(files) == 0 {
		files = map[string]string{
			w.Module() + "/__init__.py": fmt.Sprintf("NAME = %q\nVERSION = %q\n", w.Name, w.Version),
		}
	}
	info := w.distName() + "-" + w.Version + ".dist-info/"
	all := map[string]string{
		info + "METADATA": w.metadata(),
		info + "WHEEL":    "Wheel-Version: 1.0\nGenerator: coily-standin\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for p, c := range files {
		all[p] = c
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, p := range paths {
		if err := addZip(zw, p, all[p]); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(all[p]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(all[p]))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	if err := addZip(zw, info+"RECORD", record.String()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("close wheel zip: %w", err)
	}
	return buf.Bytes(), nil
}

func (w Wheel) metadata() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: a coily test stand-in\n", w.Name, w.Version)
	for _, r := range w.Requires {
		fmt.Fprintf(&b, "Requires-Dist: %s\n", r)
	}
	return b.String()
}

func addZip(zw *zip.Writer, name, content string) error {
	f, err := zw.Create(name)
	if err != nil {
		return fmt.Errorf("wheel entry %s: %w", name, err)
	}
	if _, err := f.Write([]byte(content)); err != nil {
		return fmt.Errorf("wheel entry %s: %w", name, err)
	}
	return nil
}

var nameSeparators = regexp.MustCompile(`[-_.]+`)

// normalizeName is PEP 503's normalisation of a project name: lower case,
// every run of "-", "_" and "." made one "-".
func normalizeName(name string) string {
	return nameSeparators.ReplaceAllString(strings.ToLower(name), "-")
}
