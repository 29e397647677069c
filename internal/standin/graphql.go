package standin

import (
	"strings"
	"unicode"
)

// operationName returns the kind ("query" or "mutation") and the name of
// the first operation in a GraphQL document, skipping fragments and
// comments: "query RepositoryInfo($owner: String!) {…}" gives ("query",
// "RepositoryInfo"). It matches loosely: an anonymous or unparsable
// operation gives a name of "".
func operationName(doc string) (kind, name string) {
	for rest := doc; rest != ""; {
		var word string
		word, rest = nextWord(rest)
		switch word {
		case "":
			return "", ""
		case "query", "mutation", "subscription":
			name, _ = nextWord(rest)
			if !isName(name) {
				name = ""
			}
			return word, name
		case "{":
			return "query", ""
		case "fragment":
			rest = skipBlock(rest)
		default:
			return "", ""
		}
	}
	return "", ""
}

// nextWord returns the next name or punctuation character of s after
// white space and comments, and the rest of s.
func nextWord(s string) (word, rest string) {
	for {
		s = strings.TrimLeftFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == ',' })
		if !strings.HasPrefix(s, "#") {
			break
		}
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		} else {
			s = ""
		}
	}
	if s == "" {
		return "", ""
	}
	end := strings.IndexFunc(s, func(r rune) bool { return !isNameRune(r) })
	switch {
	case end == 0:
		return s[:1], s[1:]
	case end < 0:
		return s, ""
	default:
		return s[:end], s[end:]
	}
}

// skipBlock returns s after its first balanced {…} block; "" if the
// block does not close.
func skipBlock(s string) string {
	start := strings.IndexByte(s, '{')
	if start < 0 {
		return ""
	}
	depth := 0
	for i := start; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[i+1:]
			}
		}
	}
	return ""
}

func isName(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return !isNameRune(r) }) < 0 && !unicode.IsDigit(rune(s[0]))
}

func isNameRune(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
