package policy

import (
	"fmt"
	"maps"
	"net/url"
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
	// IndexDirs are the last path segments of a mirror's URL that name
	// its index, not its root: the mirror's path less one of them is the
	// default path prefix (pip fetches files beside `simple/`).
	IndexDirs []string
	// Optional are hosts an entry goes to only when the allowlist lets
	// them through; else the entry is dropped (the tool cannot reach
	// them).
	Optional []string
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
	// x-access-token), to github.com. Release assets go to
	// uploads.github.com with the API's header (gh's token lookup maps
	// every *.github.com host to github.com's token). A named host is
	// GitHub Enterprise: its API (uploads too) under /api/, git on the
	// same host.
	"gh": {Env: "GH_TOKEN", DefaultHost: "github.com", Optional: []string{"uploads.github.com"}, entries: func(host, _ string, named bool) []injectFile {
		if named {
			return []injectFile{{Host: host, Path: "/api/", Form: "token"}, {Host: host, Path: "/api/", Form: "bearer"}, {Host: host, Form: "basic"}}
		}
		const api, up = "api.github.com", "uploads.github.com"
		return []injectFile{{Host: api, Form: "token"}, {Host: api, Form: "bearer"}, {Host: "github.com", Form: "basic"},
			{Host: up, Form: "token"}, {Host: up, Form: "bearer"}}
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
	// The default path prefix is a mirror's index URL less its last
	// `simple` or `+simple` segment: pip sends the index's credentials to
	// every URL of its host, and mirrors (Artifactory, Nexus, devpi,
	// GitLab) serve the files beside the index.
	"pip": {Env: "PIP_PASSWORD", Registries: []string{"pip", "uv", "pipx", "poetry"}, DefaultHost: "pypi.org", Path: true,
		IndexDirs: []string{"simple", "+simple"},
		entries: func(host, path string, _ bool) []injectFile {
			return []injectFile{{Host: host, Path: path, Form: "basic"}}
		}},
}

// InjectPresets lists the names of the `egress.inject` presets, sorted.
func InjectPresets() []string { return slices.Sorted(maps.Keys(injectPresets)) }

// expandInjectPreset turns an entry naming a preset into the entries it
// stands for, and inspects their hosts (which must be in the allowlist).
// With the host from a `registries:` mirror, the mirror's path is the
// default path prefix, and a written path must be under it.
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
	host, named, path := f.Host, f.Host != "", f.Path
	if !named {
		var prefix string
		var err error
		if host, prefix, err = p.defaultHost(e); err != nil {
			return nil, fmt.Errorf("egress inject: preset %s: %w", f.Preset, err)
		}
		if path, err = underPrefix(path, prefix); err != nil {
			return nil, fmt.Errorf("egress inject: preset %s: %w", f.Preset, err)
		}
	}
	if host == "" {
		return nil, fmt.Errorf("egress inject: preset %s needs host: HOST[:PORT]", f.Preset)
	}
	env := f.Env
	if env == "" {
		env = p.Env
	}
	var out []injectFile
	for _, x := range p.entries(host, path, named) {
		x.Env, x.Credential = env, f.Credential
		h, port, err := injectHost(x.Host)
		if err != nil {
			return nil, err
		}
		if slices.Contains(p.Optional, h) && !e.Allows(h, cmpPort(port)) {
			continue
		}
		if !slices.Contains(e.Inspect, h) {
			if err := inspectHost(e, h); err != nil {
				return nil, fmt.Errorf("preset %s: %w", f.Preset, err)
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// defaultHost is the host of the first mirror of p's registries the rule
// names, with the mirror's path as a prefix, else p's DefaultHost and no
// prefix.
func (p injectPreset) defaultHost(e *Egress) (host, prefix string, err error) {
	for _, name := range p.Registries {
		if !slices.Contains(e.Presets, name) {
			continue
		}
		raw := e.Registries[name]
		hp, err := registryHost(raw)
		if err != nil {
			continue
		}
		if hp.Port == 443 {
			hp.Port = 0
		}
		prefix, err := p.mirrorPrefix(raw)
		if err != nil {
			return "", "", fmt.Errorf("registries: %s: %w", name, err)
		}
		return hp.String(), prefix, nil
	}
	return p.DefaultHost, "", nil
}

// mirrorPrefix is the path prefix a mirror's URL stands for: its path as
// sent (escaped), ending in "/", less a last segment of p.IndexDirs; ""
// for the root. A path no injection can name (a dot segment, a percent
// escape, "//") is refused rather than widened to the whole host.
func (p injectPreset) mirrorPrefix(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("mirror URL: %w", err)
	}
	dir := strings.TrimSuffix(u.EscapedPath(), "/")
	if i := strings.LastIndexByte(dir, '/'); i >= 0 && slices.Contains(p.IndexDirs, dir[i+1:]) {
		dir = dir[:i]
	}
	if dir == "" {
		return "", nil
	}
	prefix := dir + "/"
	if err := checkInjectPath(prefix); err != nil {
		return "", fmt.Errorf("the mirror's path cannot be an injection prefix (%w)", err)
	}
	return prefix, nil
}

// underPrefix is the path an entry from a mirror gets: the mirror's
// prefix when none is written; a written path must be under it (a path
// narrows the credential, never widens it past the mirror).
func underPrefix(path, prefix string) (string, error) {
	switch {
	case prefix == "":
		return path, nil
	case path == "":
		return prefix, nil
	case !strings.HasPrefix(path, prefix) && path+"/" != prefix:
		return "", fmt.Errorf("path %q is not under the registries mirror's path %q", path, prefix)
	}
	return path, nil
}
