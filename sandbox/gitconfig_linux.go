package sandbox

import (
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// What a git directory's configuration names that git will run or load
// (core.hooksPath, include.path) is protected when it lies inside the
// workspace. A hostile configuration must not take the scan past its
// budget, so what the scan reads of one is bounded: past these bounds
// the command is refused (before it) or the workspace (after it).
const (
	maxConfigBytes  = 1 << 20 // a config's size
	maxConfigPaths  = 64      // the paths one config names
	maxPathParts    = 64      // the components of one
	maxResolveSteps = 256     // the components looked at to resolve one, its links' included
)

// configPaths reads the config of the git directory gitDir (gitDirRel in
// the root) for the paths it names that git will run or load: the hooks
// directory (core.hooksPath; relative to the work tree) and included
// files (include.path, includeIf.*.path; relative to the git directory).
// Those inside the workspace are added to s.extra. After the command,
// only the configuration of a git directory the scan before it found is
// read: one the command made is quarantined (the directory whole, or its
// config), so what it names needs no protection, and the command cannot
// have the server look up host paths of its choosing.
func (s *scanner) configPaths(gitDir *os.File, gitDirRel string) error {
	if s.rootPath == "" {
		return nil
	}
	if s.post {
		if st, err := statFD(gitDir); err != nil || !s.known[[2]uint64{st.Dev, st.Ino}] {
			return nil
		}
	}
	f, err := openRegular(gitDir, "config")
	if err != nil {
		return nil // absent, or no regular file: nothing git would read as its config
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return fmt.Errorf("read %s/config: %w", gitDirRel, err)
	}
	if len(data) > maxConfigBytes {
		return fmt.Errorf("%s/config is larger than %d bytes: coily cannot check what it names", gitDirRel, maxConfigBytes)
	}
	values := gitConfigPaths(string(data))
	if len(values) > maxConfigPaths {
		return fmt.Errorf("%s/config names %d paths (core.hooksPath, include.path): coily checks at most %d", gitDirRel, len(values), maxConfigPaths)
	}
	workTree := path.Dir(gitDirRel)
	for _, kv := range values {
		v := kv.value
		if strings.HasPrefix(v, "~") || strings.HasPrefix(v, "%(prefix)") {
			continue // the owner's home, outside any workspace
		}
		if len(strings.Split(strings.Trim(v, "/"), "/")) > maxPathParts {
			return fmt.Errorf("%s/config names a path of more than %d components: coily cannot check it", gitDirRel, maxPathParts)
		}
		base := workTree
		if kv.include {
			base = gitDirRel
		}
		abs := v
		if !path.IsAbs(v) {
			abs = s.rootPath + "/" + base + "/" + v // not cleaned: inRoot resolves its ".."
		}
		rel, ok, err := s.inRoot(abs)
		if err != nil {
			return fmt.Errorf("%s/config names %.100q: %w", gitDirRel, v, err)
		}
		if ok {
			s.extra = append(s.extra, rel)
		}
	}
	return nil
}

// inRoot returns abs, an absolute path, relative to the root when it
// lies inside it: as written, or through symbolic links outside the root
// (a home reached through a link, say), which the command cannot change.
// A path with no ".." lexically inside the root is taken as it is. Any
// other is resolved from "/" one component at a time, as the kernel does
// (".." the parent of what was resolved), each opened by descriptor
// (O_PATH, never following it) and counted as an entry of the scan,
// following links (at most 40; past them git finds nothing either),
// until it reaches the root; the rest is taken as written, as links
// inside the root are not followed (protectNamed refuses a link at the
// named path itself). An absent component, or one that cannot be looked
// at, ends it: outside the root, nothing is the command's.
func (s *scanner) inRoot(abs string) (string, bool, error) {
	if !path.IsAbs(abs) {
		return "", false, nil
	}
	if !slices.Contains(strings.Split(abs, "/"), "..") {
		if rel, ok := relUnder(path.Clean(abs), s.rootPath); ok {
			return inside(rel)
		}
	}
	w := &walker{cur: "/", fd: -1}
	defer w.close()
	if !w.reopen("/") {
		return "", false, nil
	}
	parts := strings.Split(abs[1:], "/")
	for steps := 0; len(parts) > 0; steps++ {
		if steps >= maxResolveSteps {
			return "", false, fmt.Errorf("more than %d components to resolve: coily cannot check it", maxResolveSteps)
		}
		s.entries++
		if err := s.inBudget(); err != nil {
			return "", false, err
		}
		var ok bool
		if parts, ok = w.step(parts); !ok {
			return "", false, nil
		}
		if _, ok := relUnder(w.cur, s.rootPath); ok {
			if rel, ok := relUnder(path.Join(append([]string{w.cur}, parts...)...), s.rootPath); ok {
				return inside(rel)
			}
			return "", false, nil
		}
	}
	return "", false, nil
}

// inside is rel, a path relative to the root, unless it is the root
// itself (no path git names).
func inside(rel string) (string, bool, error) {
	if rel == "." {
		return "", false, nil
	}
	return rel, true, nil
}

// walker resolves a host path one component at a time (inRoot): cur is
// the real path resolved so far (no link in it), fd an O_PATH descriptor
// of it.
type walker struct {
	cur   string
	fd    int
	links int
}

func (w *walker) close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// reopen makes dir, a real path, the walker's current directory.
func (w *walker) reopen(dir string) bool {
	w.close()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	w.cur, w.fd = dir, fd
	return true
}

// step resolves the first of parts and returns what is left to resolve
// (a link's target in front of the rest). Not ok: absent, not
// reachable, a file with components after it, or too many links.
func (w *walker) step(parts []string) ([]string, bool) {
	p, rest := parts[0], parts[1:]
	switch p {
	case "", ".":
		return rest, true
	case "..":
		return rest, w.reopen(path.Dir(w.cur))
	}
	fd, err := unix.Openat(w.fd, p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		w.close()
		w.cur, w.fd = path.Join(w.cur, p), fd
		return rest, true
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		unix.Close(fd)
		if w.links++; err != nil || n == 0 || n == len(buf) || w.links > maxLinks {
			return nil, false
		}
		target := string(buf[:n])
		if path.IsAbs(target) && !w.reopen("/") {
			return nil, false
		}
		return append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...), true
	}
	unix.Close(fd)
	if len(rest) > 0 {
		return nil, false // not a directory
	}
	w.cur = path.Join(w.cur, p)
	return rest, true
}

// relUnder returns p relative to root ("." for root itself) when p is
// root or below it.
func relUnder(p, root string) (string, bool) {
	if p == root {
		return ".", true
	}
	rest, ok := strings.CutPrefix(p, strings.TrimSuffix(root, "/")+"/")
	return rest, ok && rest != ""
}

type gitConfigPath struct {
	value   string
	include bool // include.path / includeIf.*.path (else core.hooksPath)
}

// gitConfigPaths extracts core.hooksPath and include paths from a git
// config file's text: sections "[core]", "[include]", "[includeIf …]",
// keys case-insensitive, values optionally quoted.
func gitConfigPaths(text string) []gitConfigPath {
	var out []gitConfigPath
	section := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			head := strings.TrimSpace(line[1:end])
			name, _, _ := strings.Cut(head, " ")
			name, _, _ = strings.Cut(name, ".")
			section = strings.ToLower(name)
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.ToLower(strings.TrimSpace(key))
		value = configValue(value)
		switch {
		case section == "core" && key == "hookspath" && value != "":
			out = append(out, gitConfigPath{value: value})
		case (section == "include" || section == "includeif") && key == "path" && value != "":
			out = append(out, gitConfigPath{value: value, include: true})
		}
	}
	return out
}

// configValue reads a config value as git does (config.c, parse_value):
// quotes delimit parts where # and ; do not start a comment, \", \\, \n,
// \t and \b are escapes, whitespace outside quotes is one space each,
// dropped at both ends.
func configValue(raw string) string {
	var b strings.Builder
	quoted, spaces := false, 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '"':
			quoted = !quoted
			continue
		case !quoted && (c == '#' || c == ';'):
			return b.String()
		case !quoted && (c == ' ' || c == '\t' || c == '\r'):
			if b.Len() > 0 {
				spaces++
			}
			continue
		case c == '\\' && i+1 < len(raw):
			i++
			c = raw[i]
			switch c {
			case 'n':
				c = '\n'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			}
		}
		for ; spaces > 0; spaces-- {
			b.WriteByte(' ')
		}
		b.WriteByte(c)
	}
	return b.String()
}
