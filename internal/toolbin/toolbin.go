// Package toolbin finds, for tests, the programs scripts/ build into the
// module's bin/ (vaultdev, headscale, the npm tools), has the kernel stop
// the programs a test starts when the test process dies, and finds the
// loopback ports they are told to listen on. Tests only.
package toolbin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Module is the module whose bin/ Find looks in.
const Module = "coily.dev/coily"

// Find returns the program to run: $env when set, else
// <module root>/bin/<elem...> when it is a file, else "".
func Find(env string, elem ...string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	root, err := Root()
	if err != nil {
		return ""
	}
	p := filepath.Join(append([]string{root, "bin"}, elem...)...)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return ""
	}
	return p
}

// Root walks up from the working directory to the directory whose go.mod
// declares Module.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declares(string(b), Module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module " + Module + " not found above the working directory")
		}
		dir = parent
	}
}

func declares(gomod, module string) bool {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" && strings.Trim(f[1], `"`) == module {
			return true
		}
	}
	return false
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago (held open together, then closed): a program told to listen
// on one may still lose it to another, and should be started again.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
