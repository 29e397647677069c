package standin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// NpmPackage is a package to publish to the registry.
type NpmPackage struct {
	Name    string
	Version string
	// Files maps paths in the package to their content. Empty means one
	// index.js exporting {name, version}.
	Files map[string]string
	// Scripts are package.json scripts, e.g. {"postinstall": "node x.js"}.
	Scripts      map[string]string
	Dependencies map[string]string
}

// DefaultNpmPackage is a tiny package without scripts:
// require("standin-pkg").name == "standin-pkg".
var DefaultNpmPackage = NpmPackage{Name: "standin-pkg", Version: "1.0.0"}

// postinstallJS opens a TCP connection to the host:port in argv[2] during
// `npm install`: through the HTTP proxy in the environment (CONNECT) when
// one is set, else directly. It prints one line and fails the install when
// the connection is not made.
const postinstallJS = `// Contacts a host during npm install (a coily test stand-in).
const http = require("http"), net = require("net");
const target = process.argv[2];
const proxy = process.env.npm_config_https_proxy || process.env.HTTPS_PROXY || process.env.https_proxy ||
  process.env.npm_config_proxy || process.env.HTTP_PROXY || process.env.http_proxy;
function done(ok, what) {
  console.log("standin-postinstall: " + target + ": " + what);
  process.exit(ok ? 0 : 1);
}
if (proxy) {
  const u = new URL(proxy);
  const req = http.request({ host: u.hostname, port: u.port || 80, method: "CONNECT", path: target });
  req.on("connect", (res, socket) => { socket.destroy(); done(res.statusCode === 200, "proxy answered " + res.statusCode); });
  req.on("response", (res) => done(false, "proxy answered " + res.statusCode));
  req.on("error", (e) => done(false, "proxy error " + (e.code || e.message)));
  req.setTimeout(10000, () => done(false, "timeout"));
  req.end();
} else {
  const i = target.lastIndexOf(":");
  const s = net.connect({ host: target.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(target.slice(i + 1)) }, () => {
    s.destroy(); done(true, "connected");
  });
  s.on("error", (e) => done(false, "error " + (e.code || e.message)));
  s.setTimeout(10000, () => done(false, "timeout"));
}
`

// ContactOnInstall returns a package whose postinstall script opens a TCP
// connection to target ("host:port") and fails the install if it cannot:
// through the proxy in HTTPS_PROXY (or npm's https-proxy, HTTP_PROXY) with
// CONNECT when one is set, else directly. It prints
// "standin-postinstall: TARGET: proxy answered 403" or "…: connected".
func ContactOnInstall(name, version, target string) NpmPackage {
	return NpmPackage{
		Name:    name,
		Version: version,
		Files: map[string]string{
			"index.js":       fmt.Sprintf("module.exports = { name: %q };\n", name),
			"postinstall.js": postinstallJS,
		},
		Scripts: map[string]string{"postinstall": "node postinstall.js " + target},
	}
}

// write lays the package out under dir and returns its directory.
func (p NpmPackage) write(dir string) (string, error) {
	if p.Name == "" || p.Version == "" {
		return "", fmt.Errorf("npm package %q@%q: want a name and a version", p.Name, p.Version)
	}
	files := map[string]string{}
	for name, content := range p.Files {
		files[name] = content
	}
	if len(files) == 0 {
		files["index.js"] = fmt.Sprintf("module.exports = { name: %q, version: %q };\n", p.Name, p.Version)
	}
	manifest := map[string]any{
		"name": p.Name, "version": p.Version, "main": "index.js",
		"description": "a coily test stand-in", "license": "MIT",
	}
	if len(p.Scripts) > 0 {
		manifest["scripts"] = p.Scripts
	}
	if len(p.Dependencies) > 0 {
		manifest["dependencies"] = p.Dependencies
	}
	b, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return "", fmt.Errorf("package.json: %w", err)
	}
	root := filepath.Join(dir, "pkg")
	files["package.json"] = string(b) + "\n"
	for name, content := range files {
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			return "", fmt.Errorf("npm package file %q is outside the package", name)
		}
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", fmt.Errorf("npm package: %w", err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return "", fmt.Errorf("npm package: %w", err)
		}
	}
	return root, nil
}
