// Package passenv says which of its caller's environment variables a shim
// (a coily-exec link, a script shim, coily exec) forwards with a command:
// the names the live policy's rules for that command list in pass_env, as
// ListCommands gives them, and never any other.
//
// The names are kept in a small file in the user's cache directory, one
// per server, with the SHA-256 of the policy they came from. A command
// reads it (no call of its own); the server says which policy the command
// ran under (ExecExit.policy_sha256), and a different one makes the client
// ask ListCommands again, for the next command. The file is the agent's
// own: whatever it holds, the server adds to the command only the offered
// variables the allowing rule lists in pass_env, and drops the rest.
package passenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"coily.dev/coily/client"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/regularfile"
)

// maxFile bounds what is read of the cache file.
const maxFile = 64 << 10

// maxNames bounds the names kept for one command (the server takes at
// most 64 variables).
const maxNames = 64

// namePattern is a variable name as the server accepts one.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Names are the pass_env names of a server's live policy, by command name
// and by binary path.
type Names struct {
	Policy   string              `json:"policy_sha256"`
	Commands map[string][]string `json:"commands"`
}

// Lister is the one call the names come from.
type Lister interface {
	ListCommands(context.Context, *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error)
}

// FromRules collects the pass_env names of rules (ListCommands' allow
// rules) under policy.
func FromRules(policy string, rules []*coilyv1.CommandRule) *Names {
	n := &Names{Policy: policy, Commands: map[string][]string{}}
	for _, r := range rules {
		for _, key := range []string{r.GetCommand(), r.GetBinary()} {
			if key == "" {
				continue
			}
			for _, name := range r.GetPassEnv() {
				if namePattern.MatchString(name) && !slices.Contains(n.Commands[key], name) && len(n.Commands[key]) < maxNames {
					n.Commands[key] = append(n.Commands[key], name)
				}
			}
		}
	}
	return n
}

// Offer returns the variables to forward for argv0 (a command name or an
// absolute path): those of its pass_env names that are set in getenv.
func (n *Names) Offer(argv0 string, getenv func(string) string) map[string]string {
	if n == nil {
		return nil
	}
	var out map[string]string
	for _, name := range n.Commands[argv0] {
		if v := getenv(name); v != "" && namePattern.MatchString(name) {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = v
		}
	}
	return out
}

// Path is the cache file for the server s reaches: in the user's cache
// directory ($XDG_CACHE_HOME/coily or the system's), named by a hash of
// the route, so that two servers never share one. "" when there is no
// cache directory.
func Path(s client.Settings) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	where := s.Server
	switch route := s.Where(true); route {
	case client.RouteSocket:
		where = s.SocketPath()
	case client.RouteDev:
		where = s.Dev
	}
	sum := sha256.Sum256([]byte(string(s.Where(true)) + "\x00" + where))
	return filepath.Join(dir, "coily", "pass-env-"+hex.EncodeToString(sum[:8])+".json")
}

// Load reads the cache file at path; nil when it is absent or unreadable.
func Load(path string) *Names {
	if path == "" {
		return nil
	}
	data, err := regularfile.Read(path, maxFile) // a FIFO there does not hold the shim
	if err != nil {
		return nil
	}
	var n Names
	if json.Unmarshal(data, &n) != nil {
		return nil
	}
	return &n
}

// save writes n to path by a temporary file renamed into place, private
// to the user.
func (n *Names) save(path string) error {
	if path == "" {
		return errors.New("no cache directory")
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pass-env-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Prepare returns the names kept at path, or, when there are none, asks
// api and keeps what it says. A failed call leaves nil: nothing is
// forwarded.
func Prepare(ctx context.Context, api Lister, path string) *Names {
	if n := Load(path); n != nil {
		return n
	}
	return refresh(ctx, api, path)
}

// After refreshes the names at path when the command ran under a policy
// other than the one they came from (policy, ExecExit.policy_sha256).
func After(ctx context.Context, api Lister, path string, n *Names, policy string) {
	if policy == "" || n != nil && n.Policy == policy {
		return
	}
	refresh(ctx, api, path)
}

func refresh(ctx context.Context, api Lister, path string) *Names {
	resp, err := api.ListCommands(ctx, &coilyv1.ListCommandsRequest{})
	if err != nil {
		return nil
	}
	n := FromRules(resp.GetPolicySha256(), resp.GetCommands())
	n.save(path) // a cache: not kept, it is asked for again
	return n
}
