package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/regularfile"
	"coily.dev/coily/sandbox"
	"coily.dev/coily/yamlguard"
	"coily.dev/coily/yamlpos"
)

// Bounds on a policy file, checked on its bytes before the YAML reader
// sees them (package yamlguard); values counted with aliases expanded too,
// before the file is decoded (which expands them).
const (
	// MaxFileSize bounds a policy file; larger files are refused.
	MaxFileSize = 4 << 20
	// MaxDepth bounds nesting (the top-level mapping is depth 1).
	MaxDepth = 32
	// MaxValues bounds the values (mappings, sequences, keys, scalars).
	MaxValues = 200000
	// MaxAliases bounds the aliases (*name).
	MaxAliases = 1000
	// MaxKeyLen bounds a key, in characters.
	MaxKeyLen = 1024
)

var fileLimits = yamlguard.Limits{MaxBytes: MaxFileSize, MaxDepth: MaxDepth, MaxNodes: MaxValues, MaxAliases: MaxAliases, MaxKeyLen: MaxKeyLen}

// Error is a policy load failure that points at the offending place.
type Error struct {
	File   string
	Line   int
	Column int
	Msg    string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	default:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
}

// The file's shape. Field names are the YAML keys.
type fileV1 struct {
	Version        int                 `yaml:"version"`
	LocalOperators localOperatorsFile  `yaml:"local_operators"`
	Roles          map[string]roleFile `yaml:"roles"`
	Grants         []grantFile         `yaml:"grants"`
	Commands       []ruleFile          `yaml:"commands"`
	Limits         limitsFile          `yaml:"limits"`
	Workspaces     map[string]string   `yaml:"workspaces"`
	Notify         *notifyFile         `yaml:"notify"`
	Git            *gitFile            `yaml:"git"`
}

type limitsFile struct {
	// Concurrency caps commands running at once, server-wide.
	Concurrency *int `yaml:"concurrency"`
	// PerPrincipal caps each principal's commands running at once.
	PerPrincipal *int `yaml:"per_principal"`
	// The rest are every rule's default resource limits.
	limitsFileFields `yaml:",inline"`
}

type localOperatorsFile struct {
	Users  []string `yaml:"users"`
	Groups []string `yaml:"groups"`
}

type roleFile struct {
	Permissions []string `yaml:"permissions"`
	Commands    []string `yaml:"commands"`
	Sandboxes   []string `yaml:"sandboxes"`
}

type grantFile struct {
	Principals []string `yaml:"principals"`
	Roles      []string `yaml:"roles"`
}

// Load reads and validates the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// readBounded reads the policy file without blocking on what its path
// leads to (a FIFO is refused) and refuses one over MaxFileSize.
func readBounded(path string) ([]byte, error) {
	data, err := regularfile.Read(path, MaxFileSize)
	var pe *fs.PathError
	switch {
	case errors.Is(err, regularfile.ErrTooLarge):
		return nil, fmt.Errorf("file larger than %d bytes", MaxFileSize)
	case errors.As(err, &pe):
		return nil, pe.Err // the Error names the file
	}
	return data, err
}

// ParseFile parses data read from the policy file at path: like Load,
// from bytes the caller read (the server reads a changing file with care).
func ParseFile(path string, data []byte) (*Policy, error) {
	return Parse(path, data)
}

// Parse validates data as a policy named name (used in error messages).
func Parse(name string, data []byte) (*Policy, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}
	}
	if !utf8.Valid(data) {
		return nil, &Error{File: name, Msg: "file is not valid UTF-8"}
	}
	if err := checkPrintable(name, data); err != nil {
		return nil, err
	}
	if err := yamlguard.Check(data, fileLimits); err != nil {
		return nil, guardError(name, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		e := yamlError(name, err).(*Error)
		if p, ok := yamlpos.Locate(data); ok {
			e.Line, e.Column, e.Msg = p.Line, p.Column, p.Message(err.Error())
		}
		return nil, e
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty policy"}
	}
	if err := yamlguard.CheckExpanded(&root, MaxValues); err != nil {
		return nil, guardError(name, err)
	}
	var f fileV1
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := readSections(&f, dec.Decode(&f)); err != nil {
		return nil, withColumn(yamlError(name, err), &root)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		if err != nil {
			return nil, yamlError(name, err)
		}
		return nil, &Error{File: name, Line: extra.Line, Column: extra.Column, Msg: "a policy must be a single YAML document"}
	}
	b := builder{name: name, doc: root.Content[0]}
	p := b.build(&f)
	if b.err != nil {
		return nil, b.err
	}
	sum := sha256.Sum256(data)
	p.Path, p.SHA256 = name, hex.EncodeToString(sum[:])
	return p, nil
}

// checkPrintable refuses the characters YAML does not allow, naming where
// the first one is (the YAML parser reports them without a position).
func checkPrintable(name string, data []byte) error {
	line, col := 1, 0
	for _, r := range string(data) {
		col++
		if r == '\n' {
			line, col = line+1, 0
			continue
		}
		if r == '\t' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
			(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || r >= 0x10000 {
			continue
		}
		return &Error{File: name, Line: line, Column: col, Msg: fmt.Sprintf("control character %U is not allowed", r)}
	}
	return nil
}

// guardError turns a refusal of yamlguard into an *Error.
func guardError(name string, err error) error {
	e := &Error{File: name, Msg: err.Error()}
	var g *yamlguard.Error
	if errors.As(err, &g) {
		e.Line, e.Column, e.Msg = g.Line, g.Column, g.Msg
	}
	return e
}

var yamlLine = regexp.MustCompile(`line (\d+)(?:, column (\d+))?: `)

// yamlError turns a yaml.v3 error into an *Error carrying the first line
// (and column) it names.
func yamlError(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	e := &Error{File: name, Msg: msg}
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
		e.Line, _ = strconv.Atoi(msg[m[2]:m[3]])
		if m[4] >= 0 {
			e.Column, _ = strconv.Atoi(msg[m[4]:m[5]])
		}
		e.Msg = msg[:m[0]] + msg[m[1]:]
	}
	e.Msg = strings.TrimSpace(strings.ReplaceAll(e.Msg, "\n  ", "; "))
	return e
}

// withColumn adds a column to an error that names only a line, taking it
// from the first node on that line (yaml.v3's type errors carry no column).
func withColumn(err error, root *yaml.Node) error {
	e, ok := err.(*Error)
	if !ok || e.Line == 0 || e.Column > 0 {
		return err
	}
	if n := firstOnLine(root, e.Line); n != nil {
		e.Column = n.Column
	}
	return e
}

func firstOnLine(n *yaml.Node, line int) *yaml.Node {
	if n.Line == line && n.Kind != yaml.DocumentNode {
		return n
	}
	for _, c := range n.Content {
		if found := firstOnLine(c, line); found != nil {
			return found
		}
	}
	return nil
}

// builder validates the decoded file, keeping the first error with the
// position of the node it concerns.
type builder struct {
	name string
	doc  *yaml.Node
	err  error
}

func (b *builder) failAt(n *yaml.Node, format string, args ...any) {
	if b.err != nil {
		return
	}
	e := &Error{File: b.name, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	b.err = e
}

// keyOf returns the key node named key in the mapping n, or n itself.
func keyOf(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i]
			}
		}
	}
	return n
}

// at returns the node at a path of mapping keys and sequence indexes, or
// the deepest node found on the way.
func (b *builder) at(path ...any) *yaml.Node {
	n := b.doc
	for _, step := range path {
		next := child(n, step)
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

func child(n *yaml.Node, step any) *yaml.Node {
	switch s := step.(type) {
	case string:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == s {
				return n.Content[i+1]
			}
		}
	case int:
		if n.Kind == yaml.SequenceNode && s < len(n.Content) {
			return n.Content[s]
		}
	}
	return nil
}

func (b *builder) build(f *fileV1) *Policy {
	if f.Version != 1 {
		b.failAt(b.at("version"), "version must be 1, got %d", f.Version)
	}
	for _, ops := range []struct {
		key, what string
		names     []string
	}{{"users", "user", f.LocalOperators.Users}, {"groups", "group", f.LocalOperators.Groups}} {
		for i, n := range ops.names {
			if strings.TrimSpace(n) == "" {
				b.failAt(b.at("local_operators", ops.key, i), "local operator %s must not be empty", ops.what)
			}
		}
	}
	p := &Policy{
		operatorUsers:  f.LocalOperators.Users,
		operatorGroups: f.LocalOperators.Groups,
		roles:          map[string]*Role{},
		concurrency:    DefaultConcurrency,
	}
	b.concurrency(p, &f.Limits)
	p.limits = b.resourceLimits(sandbox.DefaultLimits, &f.Limits.limitsFileFields, "limits")
	b.workspaces(p, f.Workspaces)
	b.rules(p, f.Commands)
	b.roles(p, f.Roles)
	b.grants(p, f.Grants)
	b.notify(p, f.Notify)
	b.git(p, f.Git)
	p.index()
	return p
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// workspaces validates the named workspace directories.
func (b *builder) workspaces(p *Policy, ws map[string]string) {
	p.workspaces, p.workspaceReal = map[string]string{}, map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(ws)) {
		dir := ws[name]
		switch {
		case !namePattern.MatchString(name) || name == WorkspaceTemp:
			b.failAt(keyOf(b.at("workspaces"), name), "workspace name %q must match %s and not be %q", name, namePattern, WorkspaceTemp)
		case !filepath.IsAbs(dir) || filepath.Clean(dir) != dir:
			b.failAt(b.at("workspaces", name), "workspace %q: directory must be a clean absolute path, got %q", name, dir)
		}
		p.workspaces[name] = dir
		p.workspaceReal[name] = resolvedDir(dir)
	}
	b.overlappingWorkspaces(p)
}

// resolvedDir is dir with its symbolic links resolved now, at load, or dir
// itself when it cannot be resolved (it does not exist on this host yet).
func resolvedDir(dir string) string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return dir
}

// overlappingWorkspaces refuses a workspace that is, contains or lies in
// another: a command in the outer one could replace the inner one with a
// link to anywhere, and the inner one's next command would mount it.
func (b *builder) overlappingWorkspaces(p *Policy) {
	names := slices.Sorted(maps.Keys(p.workspaces))
	for i, a := range names {
		for _, c := range names[i+1:] {
			for _, pair := range [][2]string{{p.workspaces[a], p.workspaces[c]}, {p.workspaceReal[a], p.workspaceReal[c]}} {
				if isWithin(pair[0], pair[1]) || isWithin(pair[1], pair[0]) {
					b.failAt(b.at("workspaces", c), "workspaces %q (%s) and %q (%s) overlap: a command in the outer one could redirect the inner one; name disjoint directories", a, p.workspaces[a], c, p.workspaces[c])
					return
				}
			}
		}
	}
}

// isWithin reports whether path is dir or lies beneath it.
func isWithin(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

func (b *builder) roles(p *Policy, roles map[string]roleFile) {
	// Sorted, so that the error reported first does not depend on map order.
	for _, name := range slices.Sorted(maps.Keys(roles)) {
		rf := roles[name]
		if !namePattern.MatchString(name) {
			b.failAt(keyOf(b.at("roles"), name), "role name %q must match %s", name, namePattern)
		}
		r := &Role{Name: name, Commands: rf.Commands, Sandboxes: rf.Sandboxes}
		for j, sb := range rf.Sandboxes {
			if sb != "*" && !SandboxNamePattern.MatchString(sb) {
				b.failAt(b.at("roles", name, "sandboxes", j), "role %q: sandbox name %q must match %s", name, sb, SandboxNamePattern)
			}
		}
		if len(rf.Sandboxes) > 0 && !slices.Contains(rf.Permissions, string(PermRelay)) {
			b.failAt(b.at("roles", name, "sandboxes"), "role %q: sandboxes needs the relay permission", name)
		}
		for j, perm := range rf.Permissions {
			if !slices.Contains(AllPermissions, Permission(perm)) {
				b.failAt(b.at("roles", name, "permissions", j), "role %q: unknown permission %q", name, perm)
			}
			r.Permissions = append(r.Permissions, Permission(perm))
		}
		for j, c := range rf.Commands {
			if c != "*" && !slices.ContainsFunc(p.rules, func(r *Rule) bool { return r.Name == c }) {
				b.failAt(b.at("roles", name, "commands", j), "role %q: no command rule named %q", name, c)
			}
		}
		p.roles[name] = r
	}
}

func (b *builder) grants(p *Policy, grants []grantFile) {
	for i, gf := range grants {
		if len(gf.Principals) == 0 {
			b.failAt(b.at("grants", i), "grant has no principals")
		}
		for j, pr := range gf.Principals {
			// path.Match, as matchAny uses, so the check agrees with the match.
			if _, err := path.Match(pr, ""); err != nil || pr == "" {
				b.failAt(b.at("grants", i, "principals", j), "bad principal pattern %q", pr)
			}
		}
		for j, r := range gf.Roles {
			if _, ok := p.roles[r]; !ok && r != OperatorRole {
				b.failAt(b.at("grants", i, "roles", j), "grant names undefined role %q", r)
			}
		}
		p.grants = append(p.grants, Grant(gf))
	}
}

// ParseSize parses a byte count such as "4096", "64KiB" or "4MiB".
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || v <= 0 || v > (1<<40)/u.mult {
			break
		}
		return v * u.mult, nil
	}
	return 0, errors.New("size " + strconv.Quote(s) + " must be a positive byte count like 4096, 64KiB or 4MiB (at most 1TiB)")
}
