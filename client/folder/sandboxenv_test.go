package folder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDetectSandbox(t *testing.T) {
	const (
		home  = "/sessions/brave-quiet-otter"
		user  = "brave-quiet-otter"
		proxy = "http://localhost:3128"
	)
	for _, tt := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing", nil, false},
		{"SANDBOX_RUNTIME=1", map[string]string{"SANDBOX_RUNTIME": "1"}, true},
		{"SANDBOX_RUNTIME=0 beats all signals", map[string]string{"SANDBOX_RUNTIME": "0", "HOME": home, "LOGNAME": user,
			"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}, false},
		{"SANDBOX_RUNTIME=true is not 1", map[string]string{"SANDBOX_RUNTIME": "true"}, false},
		{"home alone", map[string]string{"HOME": home}, false},
		{"user alone", map[string]string{"LOGNAME": user}, false},
		{"proxy alone", map[string]string{"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}, false},
		{"home+user", map[string]string{"HOME": home, "LOGNAME": user}, true},
		{"home+proxy", map[string]string{"HOME": home, "HTTP_PROXY": proxy, "HTTPS_PROXY": "http://127.0.0.1:3129"}, true},
		{"user+proxy lower-case", map[string]string{"LOGNAME": user, "http_proxy": "http://[::1]:8080", "https_proxy": proxy}, true},
		{"all three", map[string]string{"HOME": home, "LOGNAME": user, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}, true},
		{"user+proxy without HTTPS_PROXY", map[string]string{"LOGNAME": user, "HTTP_PROXY": proxy}, false},
		{"user+proxy without port", map[string]string{"LOGNAME": user, "HTTP_PROXY": "http://localhost", "HTTPS_PROXY": "http://localhost"}, false},
		{"user+remote proxy", map[string]string{"LOGNAME": user, "HTTP_PROXY": "http://proxy.corp:3128", "HTTPS_PROXY": "http://proxy.corp:3128"}, false},
		{"user+socks proxy", map[string]string{"LOGNAME": user, "HTTP_PROXY": "socks5://localhost:1080", "HTTPS_PROXY": "socks5://localhost:1080"}, false},
		{"user+bad port", map[string]string{"LOGNAME": user, "HTTP_PROXY": "http://localhost:0", "HTTPS_PROXY": "http://localhost:99999"}, false},
		{"two-word user+home outside", map[string]string{"LOGNAME": "brave-otter", "HOME": "/home/brave-otter"}, false},
		{"upper-case user", map[string]string{"LOGNAME": "Brave-Quiet-Otter", "HOME": "/home/x", "HTTP_PROXY": proxy}, false},
		{"four-word user + /sessions itself", map[string]string{"LOGNAME": "a-b-c-d", "HOME": "/sessions"}, false},
		{"home escaping /sessions", map[string]string{"HOME": "/sessions/../root", "LOGNAME": user}, false},
		{"home under /sessions-x", map[string]string{"HOME": "/sessionsx/a", "LOGNAME": user}, false},
		{"user+v4-mapped loopback proxy", map[string]string{"LOGNAME": user, "HTTP_PROXY": "http://[::ffff:127.0.0.1]:8080", "HTTPS_PROXY": proxy}, true},
		{"user+zoned loopback proxy", map[string]string{"LOGNAME": user, "HTTP_PROXY": "http://[::1%25lo]:8080", "HTTPS_PROXY": proxy}, false},
		{"user with an empty word", map[string]string{"LOGNAME": "brave--otter", "HOME": home}, false},
		{"user with a digit, home", map[string]string{"LOGNAME": "brave-qu1et-otter", "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectSandbox(envOf(tt.env)); got != tt.want {
				t.Fatalf("DetectSandbox(%v) = %v, want %v", tt.env, got, tt.want)
			}
		})
	}
}

func TestFindMount(t *testing.T) {
	root := t.TempDir()
	mount := filepath.Join(root, "shared")
	deep := filepath.Join(mount, "project", "src")
	if err := os.MkdirAll(filepath.Join(mount, ".coily", "requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	// A .coily without requests/ is not a mount.
	if err := os.MkdirAll(filepath.Join(deep, ".coily"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		env   map[string]string
		cwd   string
		want  string
		inErr string
	}{
		{"walks up", nil, deep, mount, ""},
		{"at the mount", nil, mount, mount, ""},
		{"COILY_MOUNT wins", map[string]string{"COILY_MOUNT": mount}, other, mount, ""},
		{"none", nil, other, "", "set COILY_MOUNT"},
		{"COILY_MOUNT without .coily", map[string]string{"COILY_MOUNT": other}, deep, "", "COILY_MOUNT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FindMount(envOf(tt.env), tt.cwd)
			if tt.inErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.inErr) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, tt.inErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestKeyPath(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
		err  bool
	}{
		{map[string]string{"COILY_KEY_FILE": "/k", "HOME": "/h"}, "/k", false},
		{map[string]string{"HOME": "/sessions/x"}, "/sessions/x/.coily/key", false},
		{nil, "", true},
	} {
		got, err := KeyPath(envOf(tt.env))
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("KeyPath(%v) = %q, %v; want %q (error %v)", tt.env, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "COILY_KEY_FILE") {
			t.Errorf("error does not name COILY_KEY_FILE: %v", err)
		}
	}
}
