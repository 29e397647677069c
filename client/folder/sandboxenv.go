package folder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"coily.dev/coily/client/sandboxenv"
	"coily.dev/coily/descriptor"
)

// Environment variables of the filesystem transport.
const (
	// EnvSandboxRuntime, set to 1, says this process runs in a network-less
	// sandbox that reaches coily through a shared folder; set to 0, that it
	// does not (whatever the heuristics say).
	EnvSandboxRuntime = sandboxenv.EnvRuntime
	// EnvMount names the shared folder (the directory holding .coily/).
	EnvMount = "COILY_MOUNT"
	// EnvKeyFile names the sandbox's key file.
	EnvKeyFile = "COILY_KEY_FILE"
)

// DetectSandbox reports whether this process runs in a network-less
// sandbox (a Cowork VM) that reaches coily through a shared folder: see
// sandboxenv.Detect.
func DetectSandbox(getenv func(string) string) bool { return sandboxenv.Detect(getenv) }

// FindMount returns the shared folder: COILY_MOUNT when set, else the
// nearest of cwd and its parents that holds .coily/requests. The folder
// returned is absolute and holds .coily/requests.
func FindMount(getenv func(string) string, cwd string) (string, error) {
	if m := getenv(EnvMount); m != "" {
		abs, err := filepath.Abs(m)
		if err != nil {
			return "", fmt.Errorf("client: %s: %w", EnvMount, err)
		}
		if !isDir(descriptor.Path(abs, descriptor.RequestsDir, "")) {
			return "", fmt.Errorf("client: %s=%s has no %s directory; set it to the shared folder coily's bridge serves",
				EnvMount, m, filepath.Join(descriptor.DirName, descriptor.RequestsDir))
		}
		return abs, nil
	}
	dir, err := filepath.Abs(cwd)
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	for {
		if isDir(descriptor.Path(dir, descriptor.RequestsDir, "")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("client: no %s directory in %s or any parent; set %s to the shared folder coily's bridge serves",
		filepath.Join(descriptor.DirName, descriptor.RequestsDir), cwd, EnvMount)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// KeyPath returns the sandbox's key file: COILY_KEY_FILE when set, else
// $HOME/.coily/key. With neither set it fails, saying to set
// COILY_KEY_FILE.
func KeyPath(getenv func(string) string) (string, error) {
	if p := getenv(EnvKeyFile); p != "" {
		return p, nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".coily", "key"), nil
	}
	return "", errors.New("client: no HOME to find .coily/key in; set " + EnvKeyFile)
}
