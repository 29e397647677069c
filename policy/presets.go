package policy

import (
	"maps"
	"slices"
)

// An egressPreset is a named set of hosts pinned in code. Registry hosts
// are the package hosts a rule's `egress.registries` entry for the preset
// replaces with its mirror's host; Other hosts stay whatever the mirror.
type egressPreset struct {
	Registry []HostPort
	Other    []HostPort
}

func https(hosts ...string) []HostPort {
	out := make([]HostPort, 0, len(hosts))
	for _, h := range hosts {
		hp := HostPort{Host: h, Port: 443}
		if rest, ok := cutWildcard(h); ok {
			hp = HostPort{Host: rest, Port: 443, Suffix: true}
		}
		out = append(out, hp)
	}
	return out
}

var (
	npmHosts  = https("registry.npmjs.org")
	pypiHosts = https("pypi.org", "files.pythonhosted.org")
	gemHosts  = https("rubygems.org", "index.rubygems.org")
)

// egressPresets is the table of presets a rule's `egress.presets` may name
// (docs/policy.md lists it). Every entry is HTTPS on port 443 except
// github's git over ssh.
var egressPresets = map[string]egressPreset{
	"npm":    {Registry: npmHosts},
	"pnpm":   {Registry: npmHosts},
	"bun":    {Registry: npmHosts},
	"yarn":   {Registry: append(slices.Clone(npmHosts), https("registry.yarnpkg.com")...)},
	"pip":    {Registry: pypiHosts},
	"uv":     {Registry: pypiHosts},
	"pipx":   {Registry: pypiHosts},
	"poetry": {Registry: pypiHosts},
	"cargo":  {Registry: https("crates.io", "static.crates.io", "index.crates.io")},
	"gem":    {Registry: gemHosts},
	"bundle": {Registry: gemHosts},
	"brew":   {Registry: https("formulae.brew.sh", "ghcr.io", "pkg-containers.githubusercontent.com")},
	"github": {Other: append(https("github.com", "api.github.com", "*.githubusercontent.com",
		"codeload.github.com", "uploads.github.com"), HostPort{Host: "github.com", Port: 22})},
	"aws": {Other: https("*.amazonaws.com", "sts.amazonaws.com")},
}

// EgressPresets lists the names of the presets pinned in code, sorted.
func EgressPresets() []string { return slices.Sorted(maps.Keys(egressPresets)) }

// EgressPresetHosts returns the hosts of the preset name (without any
// mirror), or nil for an unknown name.
func EgressPresetHosts(name string) []HostPort {
	p, ok := egressPresets[name]
	if !ok {
		return nil
	}
	return append(slices.Clone(p.Registry), p.Other...)
}
