package policy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
)

// presetBlock is an egress block whose inject entry is {preset: name}
// with the keys kv adds.
func presetBlock(allow []string, presets []string, registries map[string]string, kv ...string) map[string]any {
	m := map[string]string{"credential": "vault:secret/coily/tok#token"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b := map[string]any{"allow": allow, "inject": []map[string]string{m}}
	if presets != nil {
		b["presets"] = presets
	}
	if registries != nil {
		b["registries"] = registries
	}
	return b
}

// injects prints a rule's injections one a line: ENV@HOST[:PORT]PATH:FORM.
func injects(e *policy.Egress) []string {
	var out []string
	for _, in := range e.Inject {
		out = append(out, fmt.Sprintf("%s@%s%s:%s", in.Env, in.HostPort(), in.Path, in.Form))
	}
	return out
}

// TestInjectPresets: each preset stands for the entries its tool needs,
// on the hosts it sends to (the default, a registry mirror, or the host
// named), and inspects those hosts.
func TestInjectPresets(t *testing.T) {
	cases := []struct {
		name    string
		block   map[string]any
		inject  []string
		inspect []string
	}{
		{"gh on github.com", presetBlock(nil, []string{"github"}, nil, "preset", "gh"),
			[]string{"GH_TOKEN@api.github.com:token", "GH_TOKEN@api.github.com:bearer", "GH_TOKEN@github.com:basic"},
			[]string{"api.github.com", "github.com"}},
		{"gh on an Enterprise host", presetBlock([]string{"ghe.example.com:8443"}, nil, nil, "preset", "gh", "host", "ghe.example.com:8443", "env", "GH_ENTERPRISE_TOKEN"),
			[]string{"GH_ENTERPRISE_TOKEN@ghe.example.com:8443/api/:token", "GH_ENTERPRISE_TOKEN@ghe.example.com:8443/api/:bearer", "GH_ENTERPRISE_TOKEN@ghe.example.com:8443:basic"},
			[]string{"ghe.example.com"}},
		{"git-https", presetBlock([]string{"git.example.com"}, nil, nil, "preset", "git-https", "host", "git.example.com", "path", "/alice/"),
			[]string{"GIT_TOKEN@git.example.com/alice/:basic"}, []string{"git.example.com"}},
		{"npm", presetBlock(nil, []string{"npm"}, nil, "preset", "npm"),
			[]string{"NPM_TOKEN@registry.npmjs.org:bearer"}, []string{"registry.npmjs.org"}},
		{"npm mirror", presetBlock(nil, []string{"npm"}, map[string]string{"npm": "https://npm.internal:4873/"}, "preset", "npm"),
			[]string{"NPM_TOKEN@npm.internal:4873:bearer"}, []string{"npm.internal"}},
		{"pnpm mirror", presetBlock(nil, []string{"pnpm"}, map[string]string{"pnpm": "https://npm.internal/"}, "preset", "npm"),
			[]string{"NPM_TOKEN@npm.internal:bearer"}, []string{"npm.internal"}},
		{"pip", presetBlock(nil, []string{"pip"}, nil, "preset", "pip"),
			[]string{"PIP_PASSWORD@pypi.org:basic"}, []string{"pypi.org"}},
		{"pip mirror, named variable", presetBlock(nil, []string{"pip"}, map[string]string{"pip": "https://pypi.internal/simple/"}, "preset", "pip", "env", "PYPI_PASS"),
			[]string{"PYPI_PASS@pypi.internal:basic"}, []string{"pypi.internal"}},
		{"pip named host", presetBlock([]string{"idx.example.com:8443"}, nil, nil, "preset", "pip", "host", "idx.example.com:8443", "path", "/simple/"),
			[]string{"PIP_PASSWORD@idx.example.com:8443/simple/:basic"}, []string{"idx.example.com"}},
	}
	for _, tc := range cases {
		e, err := loadInspect(t, tc.block, "")
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := injects(e); !slices.Equal(got, tc.inject) {
			t.Errorf("%s: inject %q, want %q", tc.name, got, tc.inject)
		}
		if !slices.Equal(e.Inspect, tc.inspect) {
			t.Errorf("%s: inspect %q, want %q", tc.name, e.Inspect, tc.inspect)
		}
		for _, in := range e.Inject {
			if in.Ref.String() != "vault:secret/coily/tok#token" {
				t.Errorf("%s: ref %s", tc.name, in.Ref)
			}
		}
	}
	// A preset beside an explicit inspect and http rules of its host.
	b := presetBlock(nil, []string{"github"}, nil, "preset", "gh")
	b["inspect"] = []string{"api.github.com"}
	b["http"] = map[string][]string{"github.com": {"* /alice/app.git/**"}}
	if e, err := loadInspect(t, b, ""); err != nil || !slices.Equal(e.Inspect, []string{"api.github.com", "github.com"}) {
		t.Errorf("gh beside inspect and http: %v %+v", err, e)
	}
	if e, _ := loadInspect(t, presetBlock(nil, []string{"github"}, nil, "preset", "gh"), ""); e != nil && e.Inject[0].Form != egress.FormToken {
		t.Errorf("gh's first form %v", e.Inject[0].Form)
	}
}

// TestInjectPresetsHostile: each bad preset entry is refused with an
// error naming what is wrong.
func TestInjectPresetsHostile(t *testing.T) {
	gh := []string{"github"}
	cases := []struct {
		name  string
		block map[string]any
		extra string
		err   string
	}{
		{"unknown preset", presetBlock(nil, gh, nil, "preset", "github"), "", `unknown preset "github" (known: gh, git-https, npm, pip)`},
		{"empty-looking preset", presetBlock(nil, gh, nil, "preset", " gh"), "", "unknown preset"},
		{"preset case", presetBlock(nil, gh, nil, "preset", "GH"), "", "unknown preset"},
		{"preset host not allowed", presetBlock(nil, nil, nil, "preset", "gh"), "", `"api.github.com" is not in the rule's egress allowlist`},
		{"npm without its host", presetBlock(nil, gh, nil, "preset", "npm"), "", `"registry.npmjs.org" is not in the rule's egress allowlist`},
		{"git-https without host", presetBlock([]string{"git.example.com"}, nil, nil, "preset", "git-https"), "", "needs host"},
		{"git-https to a wildcard", presetBlock([]string{"*.example.com"}, nil, nil, "preset", "git-https", "host", "*.example.com"), "", "wildcard"},
		{"git-https to a bad port", presetBlock([]string{"git.example.com"}, nil, nil, "preset", "git-https", "host", "git.example.com:0"), "", "port"},
		{"preset and form", presetBlock(nil, gh, nil, "preset", "gh", "form", "basic"), "", "sets the form"},
		{"preset and header", presetBlock(nil, gh, nil, "preset", "gh", "header", "X-Key"), "", "sets the form"},
		{"gh with a path", presetBlock(nil, gh, nil, "preset", "gh", "path", "/repos/"), "", "fixed paths"},
		{"pip dot path", presetBlock(nil, []string{"pip"}, nil, "preset", "pip", "path", "/simple/../x"), "", "dot segment"},
		{"npm path with %", presetBlock(nil, []string{"npm"}, nil, "preset", "npm", "path", "/%2e%2e/"), "", "path"},
		{"preset into a reserved variable", presetBlock(nil, gh, nil, "preset", "gh", "env", "HTTPS_PROXY"), "", "set by the server"},
		{"preset into COILY_INJECT_", presetBlock(nil, gh, nil, "preset", "gh", "env", "COILY_INJECT_GH"), "", "set by the server"},
		{"preset variable callers pass", presetBlock(nil, gh, nil, "preset", "gh"), ", env: [GH_TOKEN]", "callers may pass"},
		{"preset variable in credentials", presetBlock(nil, gh, nil, "preset", "gh"), ", credentials: {GH_TOKEN: 'vault:x/y#z'}", "also in credentials"},
		{"preset bad reference", presetBlock(nil, gh, nil, "preset", "gh", "credential", "ghp_plaintext"), "", "GH_TOKEN"},
		{"preset without credential", presetBlock(nil, gh, nil, "preset", "gh", "credential", ""), "", "GH_TOKEN"},
		{"preset with a bad host", presetBlock(nil, gh, nil, "preset", "git-https", "host", "git.example.com/x"), "", "git.example.com/x"},
	}
	for _, tc := range cases {
		if _, err := loadInspect(t, tc.block, tc.extra); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.err)
		}
	}
	b := presetBlock(nil, []string{"github"}, nil, "preset", "gh")
	b["inject"] = append(b["inject"].([]map[string]string), map[string]string{"preset": "git-https", "host": "github.com", "env": "GH_TOKEN", "credential": "vault:other/x#y"})
	if _, err := loadInspect(t, b, ""); err == nil || !strings.Contains(err.Error(), "two credentials") {
		t.Errorf("one variable, two credentials through presets: %v", err)
	}
	allow := make([]string, policy.MaxInspectHosts)
	inspect := make([]string, policy.MaxInspectHosts)
	for i := range allow {
		allow[i] = fmt.Sprintf("h%d.example.com", i)
		inspect[i] = allow[i]
	}
	b = presetBlock(allow, []string{"github"}, nil, "preset", "gh")
	b["inspect"] = inspect
	if _, err := loadInspect(t, b, ""); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a preset past the inspected hosts' bound: %v", err)
	}
}

// FuzzInjectPreset: whatever a preset entry holds, the loader refuses or
// gives injections of the preset's forms to inspected, allowed hosts,
// into a variable the server does not set, with no dot segment in a path.
func FuzzInjectPreset(f *testing.F) {
	f.Add("gh", "", "", "", "github")
	f.Add("gh", "ghe.example.com:8443", "GH_ENTERPRISE_TOKEN", "", "")
	f.Add("git-https", "git.example.com", "", "/alice/", "")
	f.Add("git-https", "*.example.com", "", "", "")
	f.Add("npm", "", "", "", "npm")
	f.Add("pip", "", "PIP_PASSWORD", "/simple/../x", "pip")
	f.Add("pip", "idx.example.com:0", "HTTPS_PROXY", "/%2e%2e/", "")
	f.Add("GH", "git.example.com/x", "COILY_INJECT_GH", "/repos/", "github")
	f.Fuzz(func(t *testing.T, preset, host, env, path, egressPreset string) {
		var presets []string
		if egressPreset != "" {
			presets = []string{egressPreset}
		}
		e, err := loadInspect(t, presetBlock([]string{"git.example.com", "ghe.example.com:8443", "idx.example.com"}, presets, nil,
			"preset", preset, "host", host, "env", env, "path", path), "")
		if err != nil {
			return
		}
		for _, in := range e.Inject {
			switch {
			case !slices.Contains(e.Inspect, in.Host), !e.Allows(in.Host, max(in.Port, 443)) && !e.Allows(in.Host, in.Port):
				t.Fatalf("inject %+v to a host not inspected or allowed (%q)", in, e.Inspect)
			case policy.ReservedEnv(in.Env), strings.Contains(in.Path, ".."), strings.Contains(in.Path, "%"):
				t.Fatalf("inject %+v", in)
			case in.Form != egress.FormBasic && in.Form != egress.FormBearer && in.Form != egress.FormToken:
				t.Fatalf("inject %+v: form %v", in, in.Form)
			}
		}
	})
}
