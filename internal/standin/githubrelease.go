package standin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Asset is a release asset uploaded to the stand-in.
type Asset struct {
	Repo   string // "owner/name"
	Tag    string
	Name   string
	Size   int64
	SHA256 string // of the bytes received, hex
}

// maxAsset is the most the stand-in reads of one asset.
const maxAsset = 64 << 20

// Assets returns the release assets uploaded so far.
func (g *GitHub) Assets() []Asset {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Asset(nil), g.assets...)
}

// release answers what `gh release upload` asks (gh 2.23, release/shared
// and release/upload): every tag of every repository has a release, its
// id the tag's index among those asked for, with no assets; its upload
// URL is on the host the client asked, under /api/uploads as on GitHub
// Enterprise. It reports whether path (under /api/v3, or /api/uploads)
// was one of these.
func (g *GitHub) release(w http.ResponseWriter, r *http.Request, path string) bool {
	if repo, tag, ok := releaseByTag(path); ok && r.Method == http.MethodGet {
		id := g.releaseID(repo, tag)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "tag_name": tag, "name": tag, "draft": false,
			"upload_url": fmt.Sprintf("https://%s/api/uploads/repos/%s/releases/%d/assets{?name,label}", r.Host, repo, id),
			"html_url":   fmt.Sprintf("https://%s/%s/releases/tag/%s", r.Host, repo, tag), "assets": []any{}})
		return true
	}
	repo, id, ok := assetUpload(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		return false
	}
	tag := g.releaseTag(repo, id)
	name := r.URL.Query().Get("name")
	if tag == "" || name == "" {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found (standin: no such release, or no name)"})
		return true
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r.Body, maxAsset+1))
	if err != nil || n > maxAsset || (r.ContentLength >= 0 && n != r.ContentLength) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": fmt.Sprintf("standin: asset of %d bytes (Content-Length %d): %v", n, r.ContentLength, err)})
		return true
	}
	g.mu.Lock()
	g.assets = append(g.assets, Asset{Repo: repo, Tag: tag, Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	aid := len(g.assets)
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"id": aid, "name": name, "size": n, "state": "uploaded",
		"browser_download_url": fmt.Sprintf("https://%s/%s/releases/download/%s/%s", r.Host, repo, tag, name)})
	return true
}

// releaseByTag reads "/repos/OWNER/NAME/releases/tags/TAG".
func releaseByTag(path string) (repo, tag string, ok bool) {
	p := strings.Split(strings.TrimPrefix(path, "/repos/"), "/")
	if !strings.HasPrefix(path, "/repos/") || len(p) != 5 || p[2] != "releases" || p[3] != "tags" || p[4] == "" {
		return "", "", false
	}
	return p[0] + "/" + p[1], p[4], true
}

// assetUpload reads "/api/uploads/repos/OWNER/NAME/releases/ID/assets".
func assetUpload(path string) (repo string, id int, ok bool) {
	rest, found := strings.CutPrefix(path, "/api/uploads/repos/")
	p := strings.Split(rest, "/")
	if !found || len(p) != 5 || p[2] != "releases" || p[4] != "assets" {
		return "", 0, false
	}
	id, err := strconv.Atoi(p[3])
	if err != nil || strconv.Itoa(id) != p[3] { // no "+1" nor "01"
		return "", 0, false
	}
	return p[0] + "/" + p[1], id, true
}

// releaseID is the id of repo's release of tag, given on first ask.
func (g *GitHub) releaseID(repo, tag string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := repo + "@" + tag
	for i, k := range g.releases {
		if k == key {
			return i + 1
		}
	}
	g.releases = append(g.releases, key)
	return len(g.releases)
}

// releaseTag is the tag of repo's release id, "" for none.
func (g *GitHub) releaseTag(repo string, id int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id < 1 || id > len(g.releases) {
		return ""
	}
	r, tag, _ := strings.Cut(g.releases[id-1], "@")
	if r != repo {
		return ""
	}
	return tag
}
