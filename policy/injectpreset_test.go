package policy_test

import (
	"fmt"
	"net/url"
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
			[]string{"GH_TOKEN@api.github.com:token", "GH_TOKEN@api.github.com:bearer", "GH_TOKEN@github.com:basic",
				"GH_TOKEN@uploads.github.com:token", "GH_TOKEN@uploads.github.com:bearer"},
			[]string{"api.github.com", "github.com", "uploads.github.com"}},
		{"gh without uploads in the allowlist", presetBlock([]string{"api.github.com", "github.com"}, nil, nil, "preset", "gh"),
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
		{"npm mirror under a path", presetBlock(nil, []string{"npm"}, map[string]string{"npm": "https://artifactory.corp/api/npm/npm-remote/"}, "preset", "npm"),
			[]string{"NPM_TOKEN@artifactory.corp/api/npm/npm-remote/:bearer"}, []string{"artifactory.corp"}},
		{"npm mirror path without its slash", presetBlock(nil, []string{"yarn"}, map[string]string{"yarn": "https://artifactory.corp:8443/api/npm/npm-remote"}, "preset", "npm"),
			[]string{"NPM_TOKEN@artifactory.corp:8443/api/npm/npm-remote/:bearer"}, []string{"artifactory.corp"}},
		{"npm mirror, a narrower path", presetBlock(nil, []string{"npm"}, map[string]string{"npm": "https://artifactory.corp/api/npm/npm-remote/"}, "preset", "npm", "path", "/api/npm/npm-remote/@alice/"),
			[]string{"NPM_TOKEN@artifactory.corp/api/npm/npm-remote/@alice/:bearer"}, []string{"artifactory.corp"}},
		{"npm mirror, its path written", presetBlock(nil, []string{"npm"}, map[string]string{"npm": "https://artifactory.corp/api/npm/npm-remote/"}, "preset", "npm", "path", "/api/npm/npm-remote"),
			[]string{"NPM_TOKEN@artifactory.corp/api/npm/npm-remote:bearer"}, []string{"artifactory.corp"}},
		{"npm mirror, a named host", presetBlock([]string{"npm.example.com"}, []string{"npm"}, map[string]string{"npm": "https://artifactory.corp/api/npm/npm-remote/"}, "preset", "npm", "host", "npm.example.com", "path", "/x/"),
			[]string{"NPM_TOKEN@npm.example.com/x/:bearer"}, []string{"npm.example.com"}},
		{"pip Artifactory mirror", presetBlock(nil, []string{"pip"}, map[string]string{"pip": "https://artifactory.corp/api/pypi/pypi-remote/simple/"}, "preset", "pip"),
			[]string{"PIP_PASSWORD@artifactory.corp/api/pypi/pypi-remote/:basic"}, []string{"artifactory.corp"}},
		{"uv devpi mirror", presetBlock(nil, []string{"uv"}, map[string]string{"uv": "https://devpi.corp/root/pypi/+simple"}, "preset", "pip"),
			[]string{"PIP_PASSWORD@devpi.corp/root/pypi/:basic"}, []string{"devpi.corp"}},
		{"pip mirror, not an index", presetBlock(nil, []string{"pip"}, map[string]string{"pip": "https://pypi.corp/team/simpler/?x=1"}, "preset", "pip"),
			[]string{"PIP_PASSWORD@pypi.corp/team/simpler/:basic"}, []string{"pypi.corp"}},
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
	if e, err := loadInspect(t, b, ""); err != nil || !slices.Equal(e.Inspect, []string{"api.github.com", "github.com", "uploads.github.com"}) {
		t.Errorf("gh beside inspect and http: %v %+v", err, e)
	}
	if e, _ := loadInspect(t, presetBlock(nil, []string{"github"}, nil, "preset", "gh"), ""); e != nil && e.Inject[0].Form != egress.FormToken {
		t.Errorf("gh's first form %v", e.Inject[0].Form)
	}
}

// TestInjectPresetsHostile: each bad preset entry is refused with an
// error naming what is wrong.
func TestInjectPresetsHostile(t *testing.T) {
	gh, npm := []string{"github"}, []string{"npm"}
	art := map[string]string{"npm": "https://artifactory.corp/api/npm/npm-remote/"}
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
		{"path outside the mirror's", presetBlock(nil, npm, art, "preset", "npm", "path", "/api/npm/other/"), "", `path "/api/npm/other/" is not under the registries mirror's path "/api/npm/npm-remote/"`},
		{"path beside the mirror's", presetBlock(nil, npm, art, "preset", "npm", "path", "/api/npm/npm-remote-evil/"), "", "not under"},
		{"path above the mirror's", presetBlock(nil, npm, art, "preset", "npm", "path", "/"), "", "not under"},
		{"path escaping the mirror's", presetBlock(nil, npm, art, "preset", "npm", "path", "/api/npm/npm-remote/../../x/"), "", "dot segment"},
		{"mirror with a dot segment", presetBlock(nil, npm, map[string]string{"npm": "https://npm.internal/a/../"}, "preset", "npm"), "", "cannot be an injection prefix"},
		{"mirror with an escape", presetBlock(nil, npm, map[string]string{"npm": "https://npm.internal/%2e%2e/x/"}, "preset", "npm"), "", "cannot be an injection prefix"},
		{"mirror with an empty segment", presetBlock(nil, npm, map[string]string{"npm": "https://npm.internal//x/"}, "preset", "npm"), "", "cannot be an injection prefix"},
		{"mirror with a space", presetBlock(nil, []string{"pip"}, map[string]string{"pip": "https://pypi.internal/a b/simple/"}, "preset", "pip"), "", "cannot be an injection prefix"},
		{"mirror with a star", presetBlock(nil, []string{"pip"}, map[string]string{"pip": "https://pypi.internal/*/simple/"}, "preset", "pip"), "", "cannot be an injection prefix"},
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
// into a variable the server does not set, with no dot segment in a path;
// to a `registries:` mirror's host, never wider than the mirror's path.
func FuzzInjectPreset(f *testing.F) {
	f.Add("gh", "", "", "", "github", "")
	f.Add("gh", "ghe.example.com:8443", "GH_ENTERPRISE_TOKEN", "", "", "")
	f.Add("git-https", "git.example.com", "", "/alice/", "", "")
	f.Add("git-https", "*.example.com", "", "", "", "")
	f.Add("npm", "", "", "", "npm", "")
	f.Add("npm", "", "", "", "npm", "https://artifactory.corp/api/npm/npm-remote/")
	f.Add("npm", "", "", "/api/npm/npm-remote-evil/", "npm", "https://artifactory.corp/api/npm/npm-remote")
	f.Add("npm", "", "", "", "yarn", "https://npm.internal/a/../")
	f.Add("npm", "", "", "", "npm", "https://npm.internal/%2e%2e/x/")
	f.Add("pip", "", "", "", "pip", "https://artifactory.corp/api/pypi/pypi-remote/simple/")
	f.Add("pip", "", "", "/", "uv", "https://devpi.corp/root/pypi/+simple")
	f.Add("pip", "", "PIP_PASSWORD", "/simple/../x", "pip", "")
	f.Add("pip", "idx.example.com:0", "HTTPS_PROXY", "/%2e%2e/", "", "")
	f.Add("GH", "git.example.com/x", "COILY_INJECT_GH", "/repos/", "github", "")
	f.Fuzz(func(t *testing.T, preset, host, env, path, egressPreset, mirror string) {
		var presets []string
		var registries map[string]string
		if egressPreset != "" {
			presets = []string{egressPreset}
			if mirror != "" {
				registries = map[string]string{egressPreset: mirror}
			}
		}
		e, err := loadInspect(t, presetBlock([]string{"git.example.com", "ghe.example.com:8443", "idx.example.com"}, presets, registries,
			"preset", preset, "host", host, "env", env, "path", path), "")
		if err != nil {
			return
		}
		for _, in := range e.Inject {
			switch {
			case !slices.Contains(e.Inspect, in.Host), !e.Allows(in.Host, max(in.Port, 443)) && !e.Allows(in.Host, in.Port):
				t.Fatalf("inject %+v to a host not inspected or allowed (%q)", in, e.Inspect)
			case policy.ReservedEnv(in.Env), hasDotSegment(in.Path), strings.Contains(in.Path, "%"):
				t.Fatalf("inject %+v", in)
			case in.Form != egress.FormBasic && in.Form != egress.FormBearer && in.Form != egress.FormToken:
				t.Fatalf("inject %+v: form %v", in, in.Form)
			case host == "" && registries != nil && !underMirror(mirror, in):
				t.Fatalf("inject %+v: wider than the mirror %q", in, mirror)
			}
		}
	})
}

// underMirror: an injection to the host of mirror (a URL whose path has
// two segments or more) is under the first of them; with one segment, a
// tool's index may be that segment, so the whole host is its.
func underMirror(mirror string, in policy.Inject) bool {
	u, err := url.Parse(mirror)
	if err != nil || u.Hostname() != in.Host {
		return true
	}
	segs := strings.Split(strings.Trim(u.EscapedPath(), "/"), "/")
	if len(segs) < 2 {
		return true
	}
	first := "/" + segs[0]
	return in.Path == first || strings.HasPrefix(in.Path, first+"/")
}

// hasDotSegment reports a "." or ".." segment in p ("/0.." has none: a
// segment that only holds dots beside other bytes is a name).
func hasDotSegment(p string) bool {
	return slices.ContainsFunc(strings.Split(p, "/"), func(seg string) bool { return seg == "." || seg == ".." })
}
