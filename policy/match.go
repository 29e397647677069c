package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ArgSpec is the argument part of a command rule: positional patterns and
// flags. It is matched against argv[1:], parsed the way getopt_long and
// pflag parse it (see MatchAllow).
//
// Allow and deny rules read the same spec differently, on purpose: an allow
// rule matches only when every reading of the arguments is one it admits,
// a deny rule matches when any plausible reading is one it names.
//
// In particular, empty Args means "no positional arguments at all" for an
// allow rule, but "any positional arguments" for a deny rule (a deny rule
// constrains only what it names).
type ArgSpec struct {
	// Args are patterns (see Glob) for the positional arguments (argv[1:]
	// minus flags and flag values), in order. A final "**" matches any
	// number (zero or more) of remaining positionals; "**" anywhere else is
	// invalid.
	Args []string
	// Flags, for allow rules: the flags the command may receive, keyed by
	// the flag exactly as written: "--repo", or "-R" (single dash and one
	// character). A flag not in Flags makes an allow rule not match, unless
	// AnyFlags.
	//
	// A value flag must be one the command reads with a required argument:
	// "--x v" is read as --x taking v. A flag whose argument is optional
	// (only "--x=v" gives it one) must not be listed with Values.
	Flags map[string]FlagSpec
	// AnyFlags, for allow rules: any flag is accepted with any value. To
	// find positionals, unknown flags are then read as taking no value
	// (except "--x=v"), which yields more positionals and so is the
	// conservative reading for positional patterns.
	AnyFlags bool
	// IfFlags: the rule matches only if at least one of these flags is
	// present. For an allow rule it must be given in the reading the rule
	// admits (MatchAllow), and each must be one Flags lists (or AnyFlags);
	// for a deny rule, and for a confirm rule's obligation, it may be
	// present in any reading (MatchDeny). Empty: flags don't matter.
	IfFlags []string

	// checked records that Validate passed, so matching need not repeat it.
	checked bool
}

// FlagSpec says what one allowed flag takes.
type FlagSpec struct {
	// Bool: the flag takes no value (--web); "--web=x" is refused.
	Bool bool
	// Values are patterns (see Glob) one of which every value of this flag
	// must match. Ignored if Bool.
	Values []string
}

// Validate reports a problem in the spec: "**" not last, a flag that is
// neither "--name" nor "-c", a flag with neither Bool nor Values, AnyFlags
// together with Flags, or a malformed pattern (NUL byte, invalid UTF-8, an
// unterminated escape).
func (a *ArgSpec) Validate() error {
	if a == nil {
		return nil
	}
	if err := a.validate(); err != nil {
		return err
	}
	a.checked = true
	return nil
}

// validate is Validate without recording that it passed: matching calls
// it on a spec that was never validated, concurrently, so it must not
// write.
func (a *ArgSpec) validate() error {
	for i, p := range a.Args {
		if p == "**" {
			if i != len(a.Args)-1 {
				return fmt.Errorf("argument %d: \"**\" may only be the last pattern", i+1)
			}
			continue
		}
		if err := checkGlob(p); err != nil {
			return fmt.Errorf("argument %d pattern %s: %v", i+1, QuoteShort(p), err)
		}
	}
	if a.AnyFlags && len(a.Flags) > 0 {
		return errors.New(`flags "any" cannot be combined with named flags`)
	}
	names := make([]string, 0, len(a.Flags))
	for k := range a.Flags {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !validFlagKey(k) {
			return fmt.Errorf("flag %s must be written --name or -c (one character)", QuoteShort(k))
		}
		fs := a.Flags[k]
		if !fs.Bool && len(fs.Values) == 0 {
			return fmt.Errorf("flag %s: needs true (no value) or value patterns", k)
		}
		for _, v := range fs.Values {
			if err := checkGlob(v); err != nil {
				return fmt.Errorf("flag %s value pattern %s: %v", k, QuoteShort(v), err)
			}
		}
	}
	for _, k := range a.IfFlags {
		if !validFlagKey(k) {
			return fmt.Errorf("if_flags entry %s must be written --name or -c (one character)", QuoteShort(k))
		}
	}
	return nil
}

// ValidateAllow reports a problem an allow rule's spec has beyond
// Validate's: an if_flags entry the rule does not allow, so that it could
// never match.
func (a *ArgSpec) ValidateAllow() error {
	if a.AnyFlags {
		return nil
	}
	for _, k := range a.IfFlags {
		if _, ok := a.Flags[k]; !ok {
			return fmt.Errorf("if_flags entry %s is not in flags, so the rule could never match", k)
		}
	}
	return nil
}

// ValidFlag reports whether k is a flag as a rule's flags write it.
func ValidFlag(k string) bool { return validFlagKey(k) }

// validFlagKey reports whether k is "--name" (name: [A-Za-z0-9][A-Za-z0-9._-]*)
// or "-c" (c: [A-Za-z0-9?]).
func validFlagKey(k string) bool {
	alnum := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	if len(k) == 2 && k[0] == '-' {
		return alnum(k[1]) || k[1] == '?'
	}
	if len(k) < 3 || !strings.HasPrefix(k, "--") || !alnum(k[2]) {
		return false
	}
	for i := 3; i < len(k); i++ {
		if c := k[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// checkGlob reports why p is not a well-formed pattern.
func checkGlob(p string) error {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("contains a NUL byte")
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case !globEscapesClosed(p):
		return errors.New(`ends in an unterminated escape "\"`)
	}
	return nil
}

// MatchAllow reports whether args (argv[1:]) satisfy the spec under allow
// semantics and, if not, why.
//
// Arguments are read left to right as getopt_long and pflag do: "--" ends
// the flags; "-" and "" are positional; "--name=value" is a flag with an
// inline value; "--name" is a flag that, when Flags lists it with Values,
// takes the next token as its value whatever it looks like; "-abc" is the
// short flags -a, -b, -c, and the first of them that takes a value takes
// the rest of the token ("-Rowner/x") or, if nothing is left, the next
// token; flags may follow positionals. Every flag must be listed (or
// AnyFlags), every value must match one of its patterns, a Bool flag must
// not be given a value, and the positionals must match Args one by one.
//
// "-R=v" is read both as "=v" (getopt) and as "v" (pflag); both must
// match. An invalid spec never matches.
func (a *ArgSpec) MatchAllow(args []string) (bool, string) {
	return a.matchAllow(args, true, nil)
}

// FlagValues returns, in order, every value the named flags take in args
// when args match the spec under allow semantics (ok false otherwise).
// "-R=v" gives both of its readings, "=v" and "v".
func (a *ArgSpec) FlagValues(args []string, names []string) (vals []string, ok bool) {
	ok, _ = a.matchAllow(args, false, func(name, val string) {
		if slices.Contains(names, name) {
			vals = append(vals, val)
		}
	})
	return vals, ok
}

// matchAllow is MatchAllow; the reason is built only when explain is set
// (building it for every rule that does not match would dominate a
// decision's cost). visit, when set, sees each value a listed value flag
// takes, every reading of it.
func (a *ArgSpec) matchAllow(args []string, explain bool, visit func(name, val string)) (bool, string) {
	if a == nil {
		a = &ArgSpec{}
	}
	if !a.checked {
		if err := a.validate(); err != nil {
			return no(explain, func() string { return "invalid rule: " + err.Error() })
		}
	}
	var posBuf [16]string
	pos := posBuf[:0]
	required := len(a.IfFlags) == 0
	for i := 0; i < len(args); i++ {
		t := args[i]
		switch argKindOf(t) {
		case argEnd:
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case argPositional:
			pos = append(pos, t)
		case argLongEq, argFlag:
			if t[1] == '-' {
				name, val, hasVal := strings.Cut(t, "=")
				if name == "--" {
					return no(explain, func() string { return "malformed flag " + QuoteShort(t) })
				}
				required = required || slices.Contains(a.IfFlags, name)
				fs, ok := a.Flags[name]
				switch {
				case !ok && a.AnyFlags:
					continue
				case !ok:
					return no(explain, func() string { return "flag " + flagLabel(name) + " is not allowed" })
				case fs.Bool && hasVal:
					return no(explain, func() string { return "flag " + name + " takes no value" })
				case fs.Bool:
					continue
				}
				if !hasVal {
					if i+1 >= len(args) {
						return no(explain, func() string { return "missing value for " + name })
					}
					i++
					val = args[i]
				}
				if ok, why := allowValue(name, fs, val, explain); !ok {
					return false, why
				}
				if visit != nil {
					visit(name, val)
				}
				continue
			}
			for group := t[1:]; group != ""; {
				_, w := utf8.DecodeRuneInString(group)
				name := "-" + group[:w]
				group = group[w:]
				required = required || slices.Contains(a.IfFlags, name)
				fs, ok := a.Flags[name]
				switch {
				case !ok && a.AnyFlags:
					continue
				case !ok:
					return no(explain, func() string { return "flag " + flagLabel(name) + " is not allowed" })
				case fs.Bool:
					continue
				}
				val := group
				group = ""
				if val == "" {
					if i+1 >= len(args) {
						return no(explain, func() string { return "missing value for " + name })
					}
					i++
					val = args[i]
				} else if val[0] == '=' {
					if ok, why := allowValue(name, fs, val[1:], explain); !ok {
						return false, why
					}
					if visit != nil {
						visit(name, val[1:])
					}
				}
				if ok, why := allowValue(name, fs, val, explain); !ok {
					return false, why
				}
				if visit != nil {
					visit(name, val)
				}
			}
		}
	}
	if !required {
		return no(explain, func() string { return "none of the flags " + strings.Join(a.IfFlags, ", ") + " is given" })
	}
	return a.allowPositionals(pos, explain)
}

func (a *ArgSpec) allowPositionals(pos []string, explain bool) (bool, string) {
	fixed, rest := len(a.Args), false
	if fixed > 0 && a.Args[fixed-1] == "**" {
		fixed, rest = fixed-1, true
	}
	if len(pos) != fixed && (!rest || len(pos) < fixed) {
		return no(explain, func() string {
			n := strconv.Itoa(len(pos)) + " positional arguments"
			if len(pos) == 1 {
				n = "1 positional argument"
			}
			if rest {
				return fmt.Sprintf("%s, rule expects at least %d", n, fixed)
			}
			return fmt.Sprintf("%s, rule expects %d", n, fixed)
		})
	}
	for i, p := range a.Args[:fixed] {
		if !Glob(p, pos[i]) {
			return no(explain, func() string {
				return fmt.Sprintf("argument %d %s does not match %s", i+1, QuoteShort(pos[i]), QuoteShort(p))
			})
		}
	}
	return true, ""
}

// no is a failed match, with its reason only when one is wanted.
func no(explain bool, reason func() string) (bool, string) {
	if !explain {
		return false, ""
	}
	return false, reason()
}

// allowValue checks one value of a listed value flag.
func allowValue(name string, fs FlagSpec, val string, explain bool) (bool, string) {
	for _, p := range fs.Values {
		if Glob(p, val) {
			return true, ""
		}
	}
	return no(explain, func() string {
		want := make([]string, len(fs.Values))
		for i, p := range fs.Values {
			want[i] = QuoteShort(p)
		}
		which := want[0]
		if len(want) > 1 {
			which = "any of " + strings.Join(want, ", ")
		}
		return fmt.Sprintf("flag %s value %s does not match %s", name, QuoteShort(val), which)
	})
}

// MatchDeny reports whether args (argv[1:]) could be read as matching the
// spec: deny semantics, where any plausible reading counts. Flags and
// AnyFlags are ignored: a deny rule does not know which flags take values.
//
// If IfFlags is not empty, one of them must appear in some reading: as
// "--name" or "--name=v", a prefix of it ("--forc": getopt_long and git accept
// abbreviations), or "-name" (Go's flag
// package); a short flag "-c" as any character of a "-xyz" group, even one
// that may be a value, or as "--c". A token after a "--" is not a flag,
// unless that "--" may itself be the value of the flag before it.
//
// If Args is not empty, the positionals must match it in some reading:
// the token after a flag written without "=" may be that flag's value (and
// so not a positional), and a flag-like token may be a positional to a
// program that does not parse it as a flag. Empty Args matches any
// positionals.
func (a *ArgSpec) MatchDeny(args []string) bool {
	if a == nil {
		a = &ArgSpec{}
	}
	if len(a.IfFlags) > 0 && !denyFlagPresent(a.IfFlags, args) {
		return false
	}
	return len(a.Args) == 0 || denyPositionals(a.Args, args)
}

// MatchObligation reports whether args (argv[1:]) could be read as a
// request a confirm rule's spec names, so that it needs the approval
// whichever allow rule admits it: MatchDeny's reading (any plausible one,
// IfFlags by any spelling), except that empty Args means no positional
// arguments, as it does for the allow rule. Flags do not narrow it.
func (a *ArgSpec) MatchObligation(args []string) bool {
	if a == nil {
		a = &ArgSpec{}
	}
	if len(a.IfFlags) > 0 && !denyFlagPresent(a.IfFlags, args) {
		return false
	}
	return denyPositionals(a.Args, args)
}

// argKind classifies one token for a parser that is not past "--".
type argKind uint8

const (
	argPositional argKind = iota // "", "-", or not starting with '-'
	argEnd                       // exactly "--"
	argLongEq                    // "--name=value"
	argFlag                      // "--name" or a short group "-abc": the next token may be a value
)

func argKindOf(t string) argKind {
	switch {
	case len(t) < 2 || t[0] != '-':
		return argPositional
	case t == "--":
		return argEnd
	case t[1] == '-' && strings.IndexByte(t, '=') >= 0:
		return argLongEq
	}
	return argFlag
}

// denyFlagPresent reports whether some reading of args has a flag named in
// ifFlags. The readings are tracked by which states a token may be parsed
// in: after a flag written without "=" (the token may be its value), after
// a "--" (the token is positional), or otherwise.
func denyFlagPresent(ifFlags []string, args []string) bool {
	var long, short []string
	for _, f := range ifFlags {
		switch {
		case strings.HasPrefix(f, "--") && len(f) > 2:
			long = append(long, f[2:])
		case len(f) > 1 && f[0] == '-':
			short = append(short, f[1:])
		}
	}
	// normal: t may be read as a flag; value: t may be the previous flag's
	// value. After "--" (in every reading) neither holds.
	normal, value := true, false
	for _, t := range args {
		var nNormal, nValue bool
		if value {
			nNormal = true // t is the previous flag's value
		}
		if normal || value {
			switch k := argKindOf(t); k {
			case argEnd:
			case argPositional:
				nNormal = true
			default:
				if flagNamed(t, long, short) {
					return true
				}
				nNormal = true
				nValue = k == argFlag
			}
		}
		normal, value = nNormal, nValue
	}
	return false
}

// flagNamed reports whether the flag token t may be one of the long names
// (without "--") or short characters (without "-").
func flagNamed(t string, long, short []string) bool {
	if t[1] == '-' {
		name, _, _ := strings.Cut(t[2:], "=")
		if name == "" {
			return false
		}
		for _, l := range long {
			if strings.HasPrefix(l, name) {
				return true
			}
		}
		return slices.Contains(short, name)
	}
	body := t[1:]
	name, _, _ := strings.Cut(body, "=")
	if slices.Contains(long, name) {
		return true
	}
	for body != "" {
		_, w := utf8.DecodeRuneInString(body)
		if slices.Contains(short, body[:w]) {
			return true
		}
		body = body[w:]
	}
	return false
}

// denyPositionals reports whether some reading of args has positionals
// matching pats. It runs the reading states of denyFlagPresent in step with
// the index of the next pattern to match: O(len(args)*len(pats)) steps.
// "**" matches any run of positionals wherever it is.
func denyPositionals(pats []string, args []string) bool {
	m := len(pats)
	cur := newDenyStates(m)
	next := newDenyStates(m)
	cur.normal[0] = true
	cur.close(pats)
	globs := make([]int8, m) // per token: 0 unknown, 1 match, -1 no match
	for _, t := range args {
		clear(globs)
		next.reset()
		consume := func(j int, dst []bool) {
			switch {
			case j >= m:
			case pats[j] == "**":
				dst[j] = true
			default:
				if globs[j] == 0 {
					globs[j] = -1
					if Glob(pats[j], t) {
						globs[j] = 1
					}
				}
				if globs[j] > 0 {
					dst[j+1] = true
				}
			}
		}
		k := argKindOf(t)
		live := false
		for j := 0; j <= m; j++ {
			if cur.ended[j] {
				consume(j, next.ended)
				live = true
			}
			if cur.value[j] {
				next.normal[j] = true
			}
			if cur.normal[j] || cur.value[j] {
				live = true
				switch k {
				case argEnd:
					next.ended[j] = true
				case argPositional:
					consume(j, next.normal)
				case argLongEq:
					next.normal[j] = true
					consume(j, next.normal)
				case argFlag:
					next.value[j] = true
					consume(j, next.normal)
				}
			}
		}
		if !live {
			return false
		}
		next.close(pats)
		cur, next = next, cur
	}
	return cur.normal[m] || cur.value[m] || cur.ended[m]
}

// denyStates holds, per pattern index, whether a reading can be there in
// each parser state.
type denyStates struct {
	normal, value, ended []bool
}

func newDenyStates(m int) *denyStates {
	return &denyStates{make([]bool, m+1), make([]bool, m+1), make([]bool, m+1)}
}

func (s *denyStates) reset() {
	clear(s.normal)
	clear(s.value)
	clear(s.ended)
}

// close lets every "**" match zero positionals.
func (s *denyStates) close(pats []string) {
	for j, p := range pats {
		if p == "**" {
			s.normal[j+1] = s.normal[j+1] || s.normal[j]
			s.value[j+1] = s.value[j+1] || s.value[j]
			s.ended[j+1] = s.ended[j+1] || s.ended[j]
		}
	}
}

// Glob reports whether s matches pattern: '*' matches any run of characters
// including '/', '?' matches exactly one character, '\' makes the next
// character literal, and every other character matches only itself, byte
// for byte: no Unicode normalisation or case folding, so look-alikes never
// match. Characters are UTF-8 runes; an invalid byte counts as one
// character. A pattern ending in an unterminated escape matches nothing.
// Glob runs in O(len(pattern)*len(s)) time and does not allocate.
func Glob(pattern, s string) bool {
	if !globEscapesClosed(pattern) {
		return false
	}
	// Two pointers with one backtrack point: on a mismatch, the last '*'
	// seen takes one more character. Earlier stars never need to, since
	// a later star can absorb whatever they would have.
	px, sx := 0, 0
	starP, starS := -1, 0
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				if sx < len(s) {
					sx += globCharLen(s, sx)
					px++
					continue
				}
			default:
				lp := px
				if c == '\\' {
					lp++
				}
				lw := globCharLen(pattern, lp)
				if sx < len(s) {
					if sw := globCharLen(s, sx); sw == lw && s[sx:sx+sw] == pattern[lp:lp+lw] {
						px, sx = lp+lw, sx+sw
						continue
					}
				}
			}
		}
		if starP >= 0 && starS < len(s) {
			starS += globCharLen(s, starS)
			px, sx = starP+1, starS
			continue
		}
		return false
	}
	return true
}

// globCharLen is the byte length of the character at s[i:], at least 1.
func globCharLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, w := utf8.DecodeRuneInString(s[i:])
	return w
}

// globEscapesClosed reports whether every '\' in p escapes a character.
// Bytes below 0x80 never occur inside a multi-byte character, so scanning
// bytes is enough.
func globEscapesClosed(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' {
			if i+1 == len(p) {
				return false
			}
			i++
		}
	}
	return true
}

// QuoteShort quotes s for a reason, cut to a readable length: the form
// every message about a rule uses for a value the policy or a caller gave.
func QuoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// flagLabel shows a flag name from the arguments, quoted unless it is
// plain.
func flagLabel(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return QuoteShort(name)
		}
	}
	if len(name) > 64 {
		return QuoteShort(name)
	}
	return name
}
