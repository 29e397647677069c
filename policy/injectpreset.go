package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// An injectPreset is what one word in `egress.inject: [{preset: NAME,
// credential: REF}]` stands for: the variable the tool reads (Env, unless
// the entry names another), the host it sends the credential to when the
// entry names none, and the inject entries, in the form the tool sends.
type injectPreset struct {
	Env string
	// Registries are the egress presets whose `registries:` mirror is the
	// default host, in order; else DefaultHost. An empty DefaultHost means
	// the entry must name its host.
	Registries  []string
	DefaultHost string
	// Path says whether the entry may narrow the credential to a path.
	Path bool
	// entries are the inject entries for host (the entry's or the
	// default) and path, without variable or credential.
	entries func(host, path string, named bool) []injectFile
}

// injectPresets is the table of `egress.inject` presets (docs/policy.md
// lists them).
var injectPresets = map[string]injectPreset{
	// gh sends `Authorization: token` to the API (Bearer from other tools);
	// git over HTTPS sends Basic, the token as the password (user
	// x-access-token), to github.com. A named host is GitHub Enterprise:
	// its API under /api/, git on the same host.
	"gh": {Env: "GH_TOKEN", DefaultHost: "github.com", entries: func(host, _ string, named bool) []injectFile {
		api, git, path := "api.github.com", "github.com", ""
		if named {
			api, git, path = host, host, "/api/"
		}
		return []injectFile{{Host: api, Path: path, Form: "token"}, {Host: api, Path: path, Form: "bearer"}, {Host: git, Form: "basic"}}
	}},
	// git over HTTPS to one named host: Basic, the password swapped.
	"git-https": {Env: "GIT_TOKEN", Path: true, entries: func(host, path string, _ bool) []injectFile {
		return []injectFile{{Host: host, Path: path, Form: "basic"}}
	}},
	// npm sends a registry's `_authToken` as `Authorization: Bearer`.
	"npm": {Env: "NPM_TOKEN", Registries: []string{"npm", "pnpm", "yarn", "bun"}, DefaultHost: "registry.npmjs.org", Path: true,
		entries: func(host, path string, _ bool) []injectFile {
			return []injectFile{{Host: host, Path: path, Form: "bearer"}}
		}},
	// pip sends the user:password of PIP_INDEX_URL (or --index-url) as
	// Basic, to the index's host only.
	"pip": {Env: "PIP_PASSWORD", Registries: []string{"pip", "uv", "pipx", "poetry"}, DefaultHost: "pypi.org", Path: true,
		entries: func(host, path string, _ bool) []injectFile {
			return []injectFile{{Host: host, Path: path, Form: "basic"}}
		}},
}

// InjectPresets lists the names of the `egress.inject` presets, sorted.
func InjectPresets() []string { return slices.Sorted(maps.Keys(injectPresets)) }

// expandInjectPreset turns an entry naming a preset into the entries it
// stands for, and inspects their hosts (which must be in the allowlist).
func expandInjectPreset(e *Egress, f injectFile) ([]injectFile, error) {
	p, ok := injectPresets[f.Preset]
	switch {
	case !ok:
		return nil, fmt.Errorf("egress inject: unknown preset %q (known: %s)", f.Preset, strings.Join(InjectPresets(), ", "))
	case f.Form != "" || f.Header != "":
		return nil, fmt.Errorf("egress inject: preset %s sets the form: drop form and header", f.Preset)
	case f.Path != "" && !p.Path:
		return nil, fmt.Errorf("egress inject: preset %s sends to fixed paths: drop path, or write the entries out", f.Preset)
	}
	host, named := f.Host, f.Host != ""
	if !named {
		host = p.defaultHost(e)
	}
	if host == "" {
		return nil, fmt.Errorf("egress inject: preset %s needs host: HOST[:PORT]", f.Preset)
	}
	env := f.Env
	if env == "" {
		env = p.Env
	}
	out := p.entries(host, f.Path, named)
	for i := range out {
		out[i].Env, out[i].Credential = env, f.Credential
		h, _, err := injectHost(out[i].Host)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(e.Inspect, h) {
			if err := inspectHost(e, h); err != nil {
				return nil, fmt.Errorf("preset %s: %w", f.Preset, err)
			}
		}
	}
	return out, nil
}

// defaultHost is the host of the first mirror of p's registries the rule
// names, else p's DefaultHost.
func (p injectPreset) defaultHost(e *Egress) string {
	for _, name := range p.Registries {
		if !slices.Contains(e.Presets, name) {
			continue
		}
		if hp, err := registryHost(e.Registries[name]); err == nil {
			if hp.Port == 443 {
				hp.Port = 0
			}
			return hp.String()
		}
	}
	return p.DefaultHost
}
