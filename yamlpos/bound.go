package yamlpos

// Bounds on what Locate hands the second reader. They are counted on the
// raw bytes, so that they hold whatever the reader makes of quotes,
// comments and indentation: no token can start but at a word or an
// indicator, no flow collection can open but at a bracket, and block
// collections nest deeper on a line only at "- " or "? " (deeper over
// lines only by indenting further, which the size bounds).
const (
	maxBytes    = 256 << 10
	maxWords    = 50000
	maxBrackets = 2000
	maxEntries  = 32 // "- " and "? " on one line
)

// bounded reports whether data is within the bounds.
func bounded(data []byte) bool {
	if len(data) > maxBytes {
		return false
	}
	words, brackets, entries := 0, 0, 0
	space := true // the previous byte separates words
	for i, c := range data {
		switch c {
		case ' ', '\t', '\r', '\n':
			if c == '\n' || c == '\r' {
				entries = 0
			}
			space = true
			continue
		case '[', '{':
			brackets++
			words++
			space = true
			continue
		case ']', '}', ',', ':':
			words++
			space = true
			continue
		case '-', '?':
			if space && (i+1 == len(data) || data[i+1] == ' ' || data[i+1] == '\t') {
				entries++
			}
		}
		if space {
			words++
		}
		space = false
		if words > maxWords || brackets > maxBrackets || entries > maxEntries {
			return false
		}
	}
	return words <= maxWords && brackets <= maxBrackets
}
