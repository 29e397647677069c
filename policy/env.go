package policy

import (
	"maps"
	"slices"
	"strings"
)

// Environment variables a rule's `env:` may not let a caller pass: they
// change which program runs, which code it loads, which configuration it
// reads (and so which programs that configuration runs), or whom it trusts
// — each a way for the caller to run code of its own while the rule's
// credentials are in the environment. docs/policy.md lists them.
var (
	envForbidden = []string{
		// The shell, the loader and the locale machinery.
		"PATH", "HOME", "SHELL", "ENV", "BASH_ENV", "BASHOPTS", "SHELLOPTS", "PS4", "PROMPT_COMMAND", "IFS",
		"CDPATH", "GLOBIGNORE", "TMPDIR", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF",
		"MALLOC_CHECK_", "GLIBC_TUNABLES", "TZDIR",
		// Programs tools start: pagers, editors, browsers, askpass.
		"PAGER", "EDITOR", "VISUAL", "BROWSER", "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "SUDO_ASKPASS", "LESSOPEN",
		"LESSCLOSE", "MANPAGER", "MANOPT",
		// Interpreters' start-up code and module paths.
		"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONBREAKPOINT",
		"PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYLIB", "RUBYOPT", "GEM_HOME", "GEM_PATH", "BUNDLE_GEMFILE",
		"NODE_OPTIONS", "NODE_PATH", "NODE_EXTRA_CA_CERTS", "NODE_TLS_REJECT_UNAUTHORIZED", "JAVA_TOOL_OPTIONS",
		"_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_PATH", "LUA_CPATH", "TCLLIBPATH", "R_PROFILE",
		"R_PROFILE_USER", "GOFLAGS", "CGO_LDFLAGS", "RUSTC_WRAPPER", "CARGO_HOME", "RUSTFLAGS",
		// Configuration locations.
		"XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_DATA_DIRS", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
		"CURL_HOME", "WGETRC", "NETRC", "INPUTRC", "ZDOTDIR", "GNUPGHOME", "DOCKER_CONFIG", "KUBECONFIG",
		"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_PAGER", "AWS_CLI_AUTO_PROMPT", "AWS_PROFILE", "AWS_CLI_HISTORY_FILE", "AWS_DATA_PATH",
		"PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "UV_INDEX_URL", "UV_CONFIG_FILE",
		"GH_CONFIG_DIR", "GH_BROWSER", "GH_EDITOR", "GH_PAGER", "GH_HOST", "GH_DEBUG", "DEBUG", "GH_PATH",
		// Build tools: what they compile with and what their flags load.
		"MAKEFLAGS", "MAKEFILES", "MFLAGS", "CC", "CXX", "CPP", "LD", "AR", "AS", "NM", "RANLIB", "STRIP",
		"CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "RUSTC", "RUSTDOC", "RUSTC_WORKSPACE_WRAPPER",
		"GOTOOLCHAIN", "GOPROXY", "GOROOT", "GOPATH", "GOENV", "GOINSECURE", "GONOSUMDB", "GONOSUMCHECK",
		"GOPRIVATE", "GONOPROXY", "GOSUMDB", "GOCACHE", "GOMODCACHE", "KUBE_EDITOR",
		// Where requests go, and through whom.
		"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "http_proxy", "https_proxy",
		"all_proxy", "no_proxy", "ftp_proxy", "GIT_PROXY_COMMAND",
		// Shell prompts run command substitutions.
		"PS1", "PS2", "PS3", "PS4", "TERMINFO", "TERMINFO_DIRS",
		// Trust: whom TLS believes.
		"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
		"GIT_SSL_NO_VERIFY",
	}
	// Prefixes of families that all change what runs or what is read.
	envForbiddenPrefixes = []string{
		"LD_", "DYLD_", "GIT_", "NPM_CONFIG_", "npm_config_", "YARN_", "PNPM_", "BUN_", "PIP_", "POETRY_", "UV_",
		"CARGO_", "BASH_FUNC_", "BASH_", "SSH_", "GPG_", "PYTHON", "CONDA_", "VIRTUAL_ENV", "ANSIBLE_", "TF_CLI_",
		"CGO_", "MAVEN_", "GRADLE_", "KUBE", "AWS_ENDPOINT", "VAULT_", "DOCKER_", "PROMPT_", "PERL", "RUBY", "NODE_",
		"JAVA", "JDK_", "DENO_", "LUA_", "R_", "NPM_", "COILY_",
	}
)

// envHarmless are members of the forbidden families that only label or
// quieten: who a commit is by, and whether git may prompt.
var envHarmless = []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
	"GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_TERMINAL_PROMPT"}

// envForbiddenReason says why a rule may not let callers pass name, or ""
// when it may.
func envForbiddenReason(name string) string {
	if slices.Contains(envHarmless, name) {
		return ""
	}
	if slices.Contains(envForbidden, name) || slices.Contains(envForbidden, strings.ToUpper(name)) {
		return "it changes which programs or configuration the command loads, or whom it trusts"
	}
	for _, p := range envForbiddenPrefixes {
		if strings.HasPrefix(name, p) || strings.HasPrefix(strings.ToUpper(name), strings.ToUpper(p)) {
			return "variables " + p + "* change which programs or configuration the command loads"
		}
	}
	return ""
}

// envNames checks the names of a rule's env or pass_env (key): each a
// plain variable name a caller may pass (envForbiddenReason).
func (b *builder) envNames(r *Rule, rn ruleNode, key string, names []string) {
	for j, e := range names {
		if !envNamePattern.MatchString(e) {
			b.failAt(b.at("commands", ruleIndex(b, rn), key, j), "rule %q: bad environment variable name %q", r.Name, e)
		} else if why := envForbiddenReason(e); why != "" {
			b.failAt(b.at("commands", ruleIndex(b, rn), key, j), "rule %q: %s %s may not be passed by callers: %s", r.Name, key, e, why)
		}
	}
}

// passEnvJoined is a rule's env with its pass_env names added: a name a
// shim forwards is one the caller may pass.
func passEnvJoined(env, pass []string) []string {
	out := slices.Clone(env)
	for _, n := range pass {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// WithPassEnv returns env with the variables of offered (what a shim
// forwards from the caller's environment) that the rule allowing the
// request lists in pass_env; a name env already holds keeps its value.
// The rest of offered is dropped, never refused: a shim offers the
// pass_env names of every rule for its command, and only the one that
// allows the request says which it takes. Without offered, or when no
// rule allows the request, env is returned as it is.
func (p *Policy) WithPassEnv(s Subject, argv []string, env, offered map[string]string) map[string]string {
	if len(offered) == 0 {
		return env
	}
	d := p.DecideExec(s, Request{Argv: argv, Env: slices.Sorted(maps.Keys(env))})
	if d.Result != Allow || d.Rule == nil {
		return env
	}
	out := maps.Clone(env)
	for _, n := range d.Rule.PassEnv {
		v, ok := offered[n]
		if _, given := env[n]; ok && !given {
			if out == nil {
				out = map[string]string{}
			}
			out[n] = v
		}
	}
	return out
}
