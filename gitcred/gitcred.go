// Package gitcred owns coily's git credential helper: how the server hands
// git the https credentials a rule's `git_credentials:` names, and how the
// helper inside the sandbox answers git's credential protocol
// (git-credential(1)) with them.
//
// The server puts, for each credential i, its address (COILY_GIT_CRED_i,
// "host:port"), user name (COILY_GIT_USER_i) and password
// (COILY_GIT_PASS_i) into the sandboxed child's environment, with git
// configuration in GIT_CONFIG_COUNT/KEY/VALUE (command scope, read after
// every configuration file) that first empties the list of credential
// helpers and then names coily's own: the coily executable bound in the
// sandbox, run as `coily __git-credential get|store|erase`.
//
// Invariants:
//   - a password is given only for protocol https and a host and port equal
//     to a configured one (ASCII, case-insensitive; 443 when none is given);
//     any other request, or one that is malformed, oversized, repeats a key,
//     carries a url, NUL or a user name other than the configured one, gets
//     no answer at all;
//   - store and erase are ignored: nothing is ever written anywhere;
//   - no error or message of this package contains a password.
package gitcred

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// HelperCommand is the hidden coily subcommand git runs as its helper.
const HelperCommand = "__git-credential"

// DefaultUsername is the user name given with a password when the rule
// names none: what GitHub, Gitea and Forgejo accept with a token.
const DefaultUsername = "x-access-token"

// MaxCredentials bounds the credentials one rule may name.
const MaxCredentials = 16

// DefaultPort is the port of an https address that names none.
const DefaultPort = 443

// Credential is one host's user name and password.
type Credential struct {
	// Host is a DNS name in lower case; Port its https port.
	Host string
	Port int
	// Username and Password are what git sends to the host (Basic auth).
	Username string
	Password string
}

// Address is "host:port".
func (c Credential) Address() string { return c.Host + ":" + strconv.Itoa(c.Port) }

// Environment variable names for credential i.
func hostVar(i int) string { return "COILY_GIT_CRED_" + strconv.Itoa(i) }
func userVar(i int) string { return "COILY_GIT_USER_" + strconv.Itoa(i) }

// PasswordVar is the environment variable that carries credential i's
// password; the server injects it (and redacts its value from output)
// like any credential.
func PasswordVar(i int) string { return "COILY_GIT_PASS_" + strconv.Itoa(i) }

// Env is the environment, without passwords, that makes git inside the
// sandbox ask helper (an absolute path inside the sandbox) and only it for
// the credentials creds names, in order. The passwords go in PasswordVar(i).
func Env(helper string, creds []Credential) map[string]string {
	env := map[string]string{}
	for i, c := range creds {
		env[hostVar(i)] = c.Address()
		env[userVar(i)] = c.Username
	}
	config := [][2]string{
		// An empty helper empties the list built from every configuration
		// file read before (system, global, repository, worktree): command
		// scope is read last, and credential configuration is applied in
		// the order read, URL-scoped entries included.
		{"credential.helper", ""},
		{"credential.helper", helper + " " + HelperCommand},
		{"credential.useHttpPath", "false"},
	}
	env["GIT_CONFIG_COUNT"] = strconv.Itoa(len(config))
	for i, kv := range config {
		env["GIT_CONFIG_KEY_"+strconv.Itoa(i)] = kv[0]
		env["GIT_CONFIG_VALUE_"+strconv.Itoa(i)] = kv[1]
	}
	return env
}

// ErrEnv reports a helper environment that does not describe credentials
// as Env and PasswordVar write them.
var ErrEnv = errors.New("git credential environment is malformed")

// FromEnv reads the credentials Env and PasswordVar describe, through
// lookup (os.LookupEnv): credential 0, 1, … up to the first index without
// an address, at most MaxCredentials.
func FromEnv(lookup func(string) (string, bool)) ([]Credential, error) {
	var out []Credential
	for i := 0; ; i++ {
		addr, ok := lookup(hostVar(i))
		if !ok {
			return out, nil
		}
		if i == MaxCredentials {
			return nil, fmt.Errorf("%w: more than %d credentials", ErrEnv, MaxCredentials)
		}
		host, port, err := splitAddress(addr, false)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrEnv, hostVar(i), err)
		}
		user, _ := lookup(userVar(i))
		pass, _ := lookup(PasswordVar(i))
		switch {
		case !validValue(user):
			return nil, fmt.Errorf("%w: %s is empty or holds a newline or NUL", ErrEnv, userVar(i))
		case !validValue(pass):
			// The message names the variable, never its value.
			return nil, fmt.Errorf("%w: %s is empty or holds a newline or NUL", ErrEnv, PasswordVar(i))
		}
		out = append(out, Credential{Host: host, Port: port, Username: user, Password: pass})
	}
}

// ValidPassword reports whether s can be sent as a password in git's
// credential protocol: not empty, no newline, no NUL.
func ValidPassword(s string) bool { return validValue(s) }

func validValue(s string) bool { return s != "" && !strings.ContainsAny(s, "\n\x00") }

// splitAddress reads "host[:port]": host ASCII letters, digits, dots and
// hyphens, lower-cased; port 1–65535 without leading zeros, DefaultPort
// when absent and optional.
func splitAddress(s string, portOptional bool) (string, int, error) {
	host, portStr, hasPort := strings.Cut(s, ":")
	port := DefaultPort
	switch {
	case hasPort:
		p, err := strconv.Atoi(portStr)
		if err != nil || p < 1 || p > 65535 || portStr[0] < '1' || portStr[0] > '9' {
			return "", 0, errors.New("bad port")
		}
		port = p
	case !portOptional:
		return "", 0, errors.New("no port")
	}
	if host == "" || len(host) > 253 {
		return "", 0, errors.New("bad host name")
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return "", 0, errors.New("bad host name")
		}
	}
	return strings.ToLower(host), port, nil
}
