package descriptor

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"coily.dev/coily/yamlguard"
	"coily.dev/coily/yamlpos"
)

// parseYAML reads data (already checked by checkInput) as exactly one YAML
// document and converts it to a value tree, refusing everything beyond the
// JSON data model: anchors, aliases, merge keys, tags, floats, nulls,
// duplicate or non-string member names, and trees deeper than maxDepth or
// larger than maxNodes. The depth, the values and the length of keys are
// bounded on the raw bytes first (package yamlguard), before the YAML
// reader builds anything.
func parseYAML(data []byte, maxDepth, maxNodes int) (*value, error) {
	for _, c := range []struct {
		r    string
		name string
	}{{"\u0085", "U+0085 (NEL)"}, {"\u2028", "U+2028 (line separator)"}, {"\u2029", "U+2029 (paragraph separator)"}} {
		if i := bytes.Index(data, []byte(c.r)); i >= 0 {
			// YAML 1.1 readers (go.yaml.in/yaml/v3 among them) take these for
			// line breaks, YAML 1.2 readers do not: refuse the ambiguity. JSON
			// input, which has no such ambiguity, may carry them.
			e := badf("%s is only allowed in JSON input (YAML readers disagree on it)", c.name)
			e.Line, e.Column = lineCol(data, i)
			return nil, e
		}
	}
	// Aliases are refused below; until then they are values like any other.
	lim := yamlguard.Limits{MaxBytes: MaxSize, MaxDepth: maxDepth, MaxNodes: maxNodes, MaxAliases: maxNodes, MaxKeyLen: MaxKeyLen}
	if err := yamlguard.Check(data, lim); err != nil {
		return nil, guardError(err)
	}
	root, err := decodeOneYAML(data)
	if err != nil {
		return nil, err
	}
	w := yamlWalker{data: data, maxDepth: maxDepth, maxNodes: maxNodes, checkBang: bytes.IndexByte(data, '!') >= 0}
	return w.walk(root, 0, "")
}

// decodeOneYAML parses data into a node tree and checks it holds exactly one
// document.
func decodeOneYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library recovers its own errors; anything else it panics
		// with on hostile input must still only refuse the file.
		if r := recover(); r != nil {
			root, err = nil, badf("not valid YAML (the reader failed)")
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, badf("no YAML document")
		}
		e := yamlError(err)
		if p, ok := yamlpos.Locate(data); ok {
			e.Line, e.Column = p.Line, p.Column
			e.Msg = "not valid YAML: " + cleanText(p.Message(err.Error()))
		}
		return nil, e
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, badf("more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, badf("not a single YAML document")
	}
	return doc.Content[0], nil
}

// guardError turns a refusal of yamlguard into a refusal of the file.
func guardError(err error) *Error {
	e := badf("%s", err.Error())
	var g *yamlguard.Error
	if errors.As(err, &g) {
		e.Line, e.Column, e.Msg = g.Line, g.Column, g.Msg
	}
	return e
}

// yamlError turns a YAML reader error into a refusal. The reader's messages
// are fixed texts with a line number, but some quote names from the input
// (anchors, tags), so the text is cut short.
func yamlError(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{Code: CodeBadRequest}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil && line > 0 {
				e.Line, msg = line, after
			}
		}
	}
	if len(msg) > 2*maxEcho {
		cut := 2 * maxEcho
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	e.Msg = "not valid YAML: " + cleanText(msg)
	return e
}

// cleanText drops control characters from a reader's message (which may
// quote the input).
func cleanText(msg string) string {
	if len(msg) > 2*maxEcho {
		cut := 2 * maxEcho
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, msg)
}

type yamlWalker struct {
	data               []byte
	maxDepth, maxNodes int
	nodes              int
	checkBang          bool
	// A cursor that turns node positions (line, character column) into byte
	// offsets. Nodes are visited in document order, so it only moves forward.
	curLine, curCol, curOff int
}

func (w *yamlWalker) fail(n *yaml.Node, path, format string, args ...any) *Error {
	e := badf(format, args...)
	e.Field = path
	e.Line, e.Column = n.Line, n.Column
	return e
}

func (w *yamlWalker) walk(n *yaml.Node, depth int, path string) (*value, error) {
	w.nodes++
	if w.nodes > w.maxNodes {
		return nil, w.fail(n, path, "more than %d values", w.maxNodes)
	}
	if n.Kind == yaml.AliasNode {
		return nil, w.fail(n, path, "aliases are not allowed")
	}
	if n.Anchor != "" {
		return nil, w.fail(n, path, "anchors are not allowed")
	}
	if n.Style&yaml.TaggedStyle != 0 {
		return nil, w.fail(n, path, "tags are not allowed")
	}
	if w.checkBang {
		// The non-specific tag "!" leaves no trace in the node tree; a node
		// that starts with '!' has a tag, since nothing else can start so.
		off, ok := w.offset(n.Line, n.Column)
		if !ok {
			return nil, w.fail(n, path, "cannot locate the value in the input")
		}
		if w.data[off] == '!' {
			return nil, w.fail(n, path, "tags are not allowed")
		}
	}
	p := pos{line: n.Line, col: n.Column, off: -1}
	switch n.Kind {
	case yaml.MappingNode:
		if depth+1 > w.maxDepth {
			return nil, w.fail(n, path, "nested more than %d deep", w.maxDepth)
		}
		if len(n.Content)%2 != 0 {
			return nil, w.fail(n, path, "malformed mapping")
		}
		v := &value{kind: kindObject, pos: p}
		seen := make(map[string]struct{}, len(n.Content)/2)
		for i := 0; i < len(n.Content); i += 2 {
			kn := n.Content[i]
			if kn.Kind == yaml.ScalarNode && kn.Tag == "!!merge" && kn.Style&yaml.TaggedStyle == 0 {
				return nil, w.fail(kn, path, "merge keys (<<) are not allowed")
			}
			k, err := w.walk(kn, depth+1, path)
			if err != nil {
				return nil, err
			}
			if k.kind != kindString {
				return nil, w.fail(kn, path, "member names must be strings")
			}
			mpath := memberPath(path, k.str)
			if _, dup := seen[k.str]; dup {
				return nil, w.fail(kn, mpath, "duplicate member name")
			}
			seen[k.str] = struct{}{}
			val, err := w.walk(n.Content[i+1], depth+1, mpath)
			if err != nil {
				return nil, err
			}
			v.members = append(v.members, member{key: k.str, keyPos: k.pos, val: val})
		}
		return v, nil
	case yaml.SequenceNode:
		if depth+1 > w.maxDepth {
			return nil, w.fail(n, path, "nested more than %d deep", w.maxDepth)
		}
		v := &value{kind: kindArray, pos: p}
		for i, c := range n.Content {
			e, err := w.walk(c, depth+1, indexPath(path, i))
			if err != nil {
				return nil, err
			}
			v.items = append(v.items, e)
		}
		return v, nil
	case yaml.ScalarNode:
		return w.scalar(n, path, p)
	default:
		return nil, w.fail(n, path, "unexpected YAML node")
	}
}

// scalar maps a scalar to JSON by its resolved YAML tag. Only strings,
// integers in plain decimal and booleans are allowed. A plain scalar the
// YAML 1.1 reader resolves as a timestamp is a string in YAML 1.2's core
// schema, and so is taken as the string it is written as.
func (w *yamlWalker) scalar(n *yaml.Node, path string, p pos) (*value, error) {
	switch n.Tag {
	case "!!str", "!!timestamp":
		if !utf8.ValidString(n.Value) {
			return nil, w.fail(n, path, "string is not valid UTF-8")
		}
		return &value{kind: kindString, str: n.Value, pos: p}, nil
	case "!!bool":
		switch n.Value {
		case "true", "True", "TRUE":
			return &value{kind: kindBool, b: true, pos: p}, nil
		case "false", "False", "FALSE":
			return &value{kind: kindBool, pos: p}, nil
		}
		return nil, w.fail(n, path, "unrecognised boolean")
	case "!!int":
		v, ok := parseSafeInt(n.Value)
		if !ok {
			return nil, w.fail(n, path, "integers must be plain decimal within ±(2^53-1)")
		}
		return &value{kind: kindInt, n: v, pos: p}, nil
	case "!!float":
		return nil, w.fail(n, path, "floating-point numbers are not allowed")
	case "!!null":
		return nil, w.fail(n, path, "null is not allowed (leave the member out instead)")
	case "!!merge":
		return nil, w.fail(n, path, "merge keys (<<) are not allowed")
	default:
		return nil, w.fail(n, path, "unsupported YAML scalar type")
	}
}

// offset returns the byte offset of the 1-based line and character column.
func (w *yamlWalker) offset(line, col int) (int, bool) {
	if line < 1 || col < 1 {
		return 0, false
	}
	if line < w.curLine || (line == w.curLine && col < w.curCol) || w.curLine == 0 {
		w.curLine, w.curCol, w.curOff = 1, 1, 0
	}
	d := w.data
	for w.curLine < line {
		if w.curOff >= len(d) {
			return 0, false
		}
		c := d[w.curOff]
		w.curOff++
		if c == '\n' || c == '\r' {
			if c == '\r' && w.curOff < len(d) && d[w.curOff] == '\n' {
				w.curOff++
			}
			w.curLine, w.curCol = w.curLine+1, 1
		}
	}
	for w.curCol < col {
		if w.curOff >= len(d) || d[w.curOff] == '\n' || d[w.curOff] == '\r' {
			return 0, false
		}
		_, size := utf8.DecodeRune(d[w.curOff:])
		w.curOff += size
		w.curCol++
	}
	if w.curOff >= len(d) {
		return 0, false
	}
	return w.curOff, true
}
