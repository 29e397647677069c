package policy_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"coily.dev/coily/egress"
	"coily.dev/coily/policy"
)

// inspectBlock is a rule's egress block with inspection, for editing.
func inspectBlock() map[string]any {
	return map[string]any{
		"allow":    []string{"api.github.com", "uploads.github.com:8443"},
		"inspect":  []string{"api.github.com"},
		"http":     map[string][]string{"api.github.com": {"GET /repos/alice/app/**", "POST /repos/alice/app/issues"}},
		"max_body": "1MiB",
		"inject": []map[string]string{{"env": "GH_TOKEN", "credential": "vault:secret/coily/github#token",
			"host": "api.github.com", "path": "/repos/", "form": "token"}},
	}
}

func loadInspect(t *testing.T, block map[string]any, extra string) (*policy.Egress, error) {
	t.Helper()
	j, err := json.Marshal(block)
	if err != nil {
		t.Fatal(err)
	}
	doc := "version: 1\ncommands:\n  - {name: r, binary: /usr/bin/curl, args: [\"**\"], network: proxied" + extra + ", egress: " + string(j) + "}\n"
	p, err := policy.Parse("inspect.yaml", []byte(doc))
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(p.Rules(), func(r *policy.Rule) bool { return r.Name == "r" })
	return p.Rules()[i].Egress, nil
}

func TestLoadEgressInspect(t *testing.T) {
	e, err := loadInspect(t, inspectBlock(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Inspect, []string{"api.github.com"}) || e.MaxBody != 1<<20 || len(e.Inject) != 1 {
		t.Fatalf("%+v", e)
	}
	in := e.Inject[0]
	if in.Env != "GH_TOKEN" || in.Host != "api.github.com" || in.Path != "/repos/" || in.Form != egress.FormToken || in.Ref.String() != "vault:secret/coily/github#token" {
		t.Errorf("inject %+v", in)
	}
	if in.Port != 0 {
		t.Errorf("inject port %d, want 0 (443)", in.Port)
	}
	b := inspectBlock()
	b["inject"].([]map[string]string)[0]["host"] = "api.github.com:8443"
	b["allow"] = append(b["allow"].([]string), "api.github.com:8443")
	if e, err := loadInspect(t, b, ""); err != nil || e.Inject[0].Host != "api.github.com" || e.Inject[0].Port != 8443 {
		t.Errorf("inject to api.github.com:8443: %v %+v", err, e)
	}
	if r := e.HTTPRules()["api.github.com"]; len(r) != 2 || !r[0].Allows("GET", "/repos/alice/app/x") {
		t.Errorf("http rules %+v", r)
	}
}

// TestLoadEgressInspectHostile: each edit of a good block is refused
// with an error naming what is wrong.
func TestLoadEgressInspectHostile(t *testing.T) {
	inj := func(kv ...string) func(map[string]any) {
		return func(b map[string]any) {
			m := b["inject"].([]map[string]string)[0]
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] == "" {
					delete(m, kv[i])
				} else {
					m[kv[i]] = kv[i+1]
				}
			}
		}
	}
	set := func(k string, v any) func(map[string]any) { return func(b map[string]any) { b[k] = v } }
	cases := []struct {
		name  string
		edit  func(map[string]any)
		extra string
		err   string
	}{
		{"inspect a host not allowed", set("inspect", []string{"github.com"}), "", "not in the rule's egress allowlist"},
		{"inspect a wildcard", set("inspect", []string{"*.github.com"}), "", "without wildcard"},
		{"inspect with a port", set("inspect", []string{"api.github.com:443"}), "", "without wildcard or port"},
		{"inspect an IP", set("inspect", []string{"127.0.0.1"}), "", "allow_cidrs"},
		{"inspect twice", set("inspect", []string{"api.github.com", "API.github.com"}), "", "twice"},
		{"http for a host not inspected", set("http", map[string][]string{"uploads.github.com": {"GET /**"}}), "", "not an inspected host"},
		{"http rule hostile", set("http", map[string][]string{"api.github.com": {"GET /a/../b"}}), "", "dot segments"},
		{"http rule without method", set("http", map[string][]string{"api.github.com": {"/a"}}), "", "METHOD"},
		{"http no rules", set("http", map[string][]string{"api.github.com": {}}), "", "1 to"},
		{"max_body zero", set("max_body", "0"), "", "max_body"},
		{"max_body junk", set("max_body", "lots"), "", "max_body"},
		{"inject to a host not inspected", inj("host", "uploads.github.com"), "", "not an inspected host"},
		{"inject a reserved variable", inj("env", "HTTPS_PROXY"), "", "set by the server"},
		{"inject a coily name", inj("env", "COILY_INJECT_X"), "", "set by the server"},
		{"inject a bad name", inj("env", "GH-TOKEN"), "", "bad variable name"},
		{"inject a passed variable", inj(), ", env: [GH_TOKEN]", "callers may pass"},
		{"inject a credential too", inj(), ", credentials: {GH_TOKEN: 'vault:x/y#z'}", "also in credentials"},
		{"inject bad path", inj("path", "repos"), "", "path"},
		{"inject dot path", inj("path", "/repos/../x"), "", "dot segment"},
		{"inject path with query", inj("path", "/repos?x"), "", "path"},
		{"inject unknown form", inj("form", "cookie"), "", "form"},
		{"inject form header without name", inj("form", "header"), "", "header: NAME"},
		{"inject form and header", inj("header", "X-Key"), "", "exclusive"},
		{"inject into Host", inj("form", "", "header", "Host"), "", "cannot carry"},
		{"inject into a proxy header", inj("form", "", "header", "Proxy-Authorization"), "", "cannot carry"},
		{"inject into a header with a colon", inj("form", "", "header", "X:Y"), "", "cannot carry"},
		{"inject bad reference", inj("credential", "plaintext-token"), "", "GH_TOKEN"},
		{"inject to a wildcard host", inj("host", "*.github.com"), "", "wildcard"},
		{"inject to a bad port", inj("host", "api.github.com:0"), "", "port"},
		{"inject to port 99999", inj("host", "api.github.com:99999"), "", "port"},
		{"inject to a port not allowed", inj("host", "api.github.com:8443"), "", "api.github.com:8443 is not in the rule's egress allowlist"},
	}
	for _, tc := range cases {
		b := inspectBlock()
		tc.edit(b)
		if _, err := loadInspect(t, b, tc.extra); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.err)
		}
	}
	b := inspectBlock()
	b["inject"] = append(b["inject"].([]map[string]string), map[string]string{"env": "GH_TOKEN", "credential": "vault:other/x#y", "host": "api.github.com", "form": "bearer"})
	if _, err := loadInspect(t, b, ""); err == nil || !strings.Contains(err.Error(), "two credentials") {
		t.Errorf("one variable, two credentials: %v", err)
	}
}

// FuzzEgressInspect: whatever inspect, http and inject hold, the loader
// refuses or gives an Egress whose inspected hosts are allowed and whose
// injections go to inspected hosts.
func FuzzEgressInspect(f *testing.F) {
	f.Add("api.github.com", "GET /repos/**", "GH_TOKEN", "/repos/", "token", "")
	f.Add("github.com", "GET /a/../b", "HTTPS_PROXY", "x", "cookie", "Host")
	f.Add("api.github.com", "* /", "X", "", "", "X-Api-Key")
	f.Add("api.github.com", "* /", "X", "/repos/a..b", "", "") // a name with dots, not a dot segment
	f.Fuzz(func(t *testing.T, inspect, rule, env, path, form, header string) {
		b := inspectBlock()
		b["inspect"] = []string{inspect}
		b["http"] = map[string][]string{inspect: {rule}}
		b["inject"] = []map[string]string{{"env": env, "credential": "vault:secret/x#y", "host": inspect, "path": path, "form": form, "header": header}}
		e, err := loadInspect(t, b, "")
		if err != nil {
			return
		}
		for _, h := range e.Inspect {
			if !e.Allows(h, 443) && !e.Allows(h, 8443) {
				t.Fatalf("inspected %q is not allowed", h)
			}
		}
		for _, in := range e.Inject {
			if !slices.Contains(e.Inspect, in.Host) || policy.ReservedEnv(in.Env) || hasDotSegment(in.Path) {
				t.Fatalf("inject %+v", in)
			}
		}
	})
}

// TestParseInjectSpecPort: VAR@HOST:PORT/PATH:FORM names the port the
// credential goes to; none is 443 (0).
func TestParseInjectSpecPort(t *testing.T) {
	for _, tc := range []struct {
		spec, host string
		port       int
		path       string
	}{
		{"GH_TOKEN@api.github.com/repos/:bearer", "api.github.com", 0, "/repos/"},
		{"GH_TOKEN@ghe.test:8443/repos/:token", "ghe.test", 8443, "/repos/"},
		{"GH_TOKEN@GHE.test:8443:basic", "ghe.test", 8443, ""},
	} {
		in, err := policy.ParseInjectSpec(tc.spec)
		if err != nil || in.Host != tc.host || in.Port != tc.port || in.Path != tc.path {
			t.Errorf("ParseInjectSpec(%q) = %+v, %v", tc.spec, in, err)
		}
	}
	for _, s := range []string{"GH_TOKEN@*.github.com:bearer", "GH_TOKEN@api.github.com:x/:bearer", "GH_TOKEN@a:1:2:bearer"} {
		if in, err := policy.ParseInjectSpec(s); err == nil {
			t.Errorf("ParseInjectSpec(%q) = %+v, want an error", s, in)
		}
	}
}

// sigv4Block injects an AWS key by re-signing: the key id, the secret
// and, when token, the session token, to s3.amazonaws.com.
func sigv4Block(envs ...string) map[string]any {
	var inject []map[string]string
	for _, env := range envs {
		inject = append(inject, map[string]string{"env": env, "credential": "vault:aws/sts/coily-s3#" + strings.ToLower(env),
			"host": "s3.amazonaws.com", "form": "sigv4"})
	}
	return map[string]any{"allow": []string{"s3.amazonaws.com", "sts.amazonaws.com"}, "inspect": []string{"s3.amazonaws.com", "sts.amazonaws.com"}, "inject": inject}
}

func TestLoadEgressInjectSigV4(t *testing.T) {
	e, err := loadInspect(t, sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"), "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := policy.SigV4Groups(e.Inject)
	if err != nil || len(g) != 1 || g[0].KeyID.Env != "AWS_ACCESS_KEY_ID" || g[0].Secret.Env != "AWS_SECRET_ACCESS_KEY" ||
		g[0].Token == nil || g[0].Token.Ref.String() != "vault:aws/sts/coily-s3#aws_session_token" {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := loadInspect(t, sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ""); err != nil {
		t.Errorf("a long-term key (no token): %v", err)
	}
	for _, tc := range []struct {
		name  string
		block map[string]any
		want  string
	}{
		{"no secret", sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"), "needs both"},
		{"no key id", sigv4Block("AWS_SECRET_ACCESS_KEY"), "needs both"},
		{"another variable", sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GH_TOKEN"), "form sigv4 is for"},
		{"twice", sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"), "twice"},
	} {
		if _, err := loadInspect(t, tc.block, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Split over two hosts, each group must be whole.
	b := sigv4Block("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
	b["inject"].([]map[string]string)[1]["host"] = "sts.amazonaws.com"
	if _, err := loadInspect(t, b, ""); err == nil || !strings.Contains(err.Error(), "needs both") {
		t.Errorf("a key split over two hosts: %v", err)
	}
	// The sandbox exec flags read the same.
	_, err = policy.ParseEgress(policy.EgressSpec{Allow: []string{"s3.test"}, Inspect: []string{"s3.test"},
		Inject: []string{"AWS_ACCESS_KEY_ID@s3.test:sigv4"}})
	if err == nil || !strings.Contains(err.Error(), "needs both") {
		t.Errorf("flags with the key id alone: %v", err)
	}
	eg, err := policy.ParseEgress(policy.EgressSpec{Allow: []string{"s3.test"}, Inspect: []string{"s3.test"},
		Inject: []string{"AWS_ACCESS_KEY_ID@s3.test:sigv4", "AWS_SECRET_ACCESS_KEY@s3.test:sigv4"}})
	if err != nil || eg.Inject[0].Form != egress.FormSigV4 {
		t.Errorf("flags: %v %+v", err, eg)
	}
}
