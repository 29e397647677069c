package descriptor

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

type parseCase struct {
	name  string
	in    string
	code  string // "" means accepted
	field string // expected Error.Field, when set
	msg   string // expected substring of the message, when set
}

func flowList(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+", ", n), ", ") + "]"
}

func flowEnv(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "V%d: x", i)
	}
	return b.String() + "}"
}

const billionLaughs = `version: 1
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
argv: *i
`

const secret = "SECRETSECRETSECRET"

var bad, hfail = CodeBadRequest, CodeHMACFail

func parseCases() []parseCase {
	long := func(n int) string { return strings.Repeat("x", n) }
	return []parseCase{
		// Accepted.
		{name: "base", in: yamlDoc()},
		{name: "base as JSON", in: baseJSON},
		{name: "minimal", in: yamlDoc("-cwd", "-env", "-stdin", "-timeout", "-requires_confirm", "-note")},
		{name: "block style", in: "version: 1\nid: 0f8fad5b-d9cb-469f-a165-70867728950e\ncreated_at: '2026-01-02T03:04:05Z'\nnonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19\nsandbox: agent-1\nargv:\n  - git\n  - status\nenv:\n  LANG: C.UTF-8\nhmac: '" + strings.Repeat("0", 64) + "'\n"},
		{name: "flow mapping at top", in: "{version: 1, id: 0f8fad5b-d9cb-469f-a165-70867728950e, created_at: 2026-01-02T03:04:05Z, nonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19, sandbox: agent-1, argv: [ls], hmac: '" + strings.Repeat("0", 64) + "'}"},
		{name: "document markers and comments", in: "# a request\n---\n" + yamlDoc() + "# end\n...\n"},
		{name: "CRLF line ends", in: strings.ReplaceAll(yamlDoc(), "\n", "\r\n")},
		{name: "stdin_base64", in: yamlDoc("-stdin", "stdin_base64=AP8Q")},
		{name: "created_at offset and fraction", in: yamlDoc("created_at=2026-01-02T03:04:05.123456789+05:30")},
		{name: "created_at negative offset", in: yamlDoc(`created_at="2026-01-02T03:04:05.5-08:00"`)},
		{name: "timeout 1", in: yamlDoc("timeout=1")},
		{name: "timeout max", in: yamlDoc("timeout=86400")},
		{name: "requires_confirm True", in: yamlDoc("requires_confirm=True")},
		{name: "argv 1024 entries", in: yamlDoc("argv=" + flowList(MaxArgs, "a"))},
		{name: "argv entry 64 KiB", in: yamlDoc("argv=[" + long(MaxArgBytes) + "]")},
		{name: "argv empty later entry", in: yamlDoc(`argv=[echo, ""]`)},
		{name: "env 256 entries", in: yamlDoc("env=" + flowEnv(MaxEnv))},
		{name: "env empty", in: yamlDoc("env={}")},
		{name: "cwd 4096 bytes", in: yamlDoc("cwd=" + long(MaxCwdBytes))},
		{name: "note 1024 bytes", in: yamlDoc("note=" + long(MaxNoteBytes))},
		{name: "stdin 1 MiB", in: yamlDoc("stdin=" + long(MaxStdin))},
		{name: "stdin_base64 1 MiB", in: yamlDoc("-stdin", "stdin_base64="+base64.StdEncoding.EncodeToString(make([]byte, MaxStdin)))},
		{name: "nonce 22", in: yamlDoc("nonce=" + strings.Repeat("a", 22))},
		{name: "nonce 128", in: yamlDoc("nonce=" + strings.Repeat("_-", 64))},
		{name: "sandbox 63", in: yamlDoc("sandbox=" + strings.Repeat("a", 63))},
		{name: "sandbox digit first", in: yamlDoc("sandbox=0a")},
		{name: "all-digit plain scalar is an integer", in: yamlDoc("sandbox=0"), code: bad, field: "sandbox", msg: "string"},
		{name: "yes is a string", in: yamlDoc("note=yes")},
		{name: "unicode note", in: yamlDoc("note=\"caf\u00e9 \U0001F600 \\x7f \\u2028\"")},
		{name: "JSON with \\/ and surrogate pair", in: strings.Replace(baseJSON, `"check the tree"`, `"a\/b \ud83d\ude00 \u2028\u0085\u007f"`, 1)},
		{name: "JSON raw U+2028 and NEL", in: strings.Replace(baseJSON, `"check the tree"`, "\"a\u2028b\u0085c\u007f\uffff\"", 1)},
		{name: "JSON leading blank", in: " \n\t" + baseJSON + "\n\n"},
		{name: "JSON -0 is 0", in: strings.Replace(baseJSON, `"timeout": 60`, `"timeout": -0`, 1), code: bad, field: "timeout", msg: "from 1"},
		{name: "YAML flow with trailing comma", in: `{"version": 1, "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "created_at": "2026-01-02T03:04:05Z", "nonce": "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19", "sandbox": "a", "argv": ["ls"], "hmac": "` + strings.Repeat("1", 64) + `",}`},

		// Size and encoding.
		{name: "3 MiB", in: yamlDoc("note=" + long(3<<20)), code: bad, msg: "larger than"},
		{name: "just over MaxSize", in: yamlDoc("stdin=" + long(MaxSize)), code: bad, msg: "larger than"},
		{name: "empty", in: "", code: bad},
		{name: "only a comment", in: "# nothing\n", code: bad},
		{name: "not UTF-8", in: yamlDoc("note=caf\xe9"), code: bad, msg: "UTF-8"},
		{name: "overlong UTF-8", in: yamlDoc("note=\xc0\xaf"), code: bad, msg: "UTF-8"},
		{name: "UTF-16 surrogate in UTF-8", in: yamlDoc("note=\xed\xa0\x80"), code: bad, msg: "UTF-8"},
		{name: "NUL byte", in: yamlDoc("note=a\x00b"), code: bad, msg: "NUL"},
		{name: "BOM", in: "\ufeff" + yamlDoc(), code: bad, msg: "byte-order mark"},
		{name: "BOM before JSON", in: "\ufeff" + baseJSON, code: bad, msg: "byte-order mark"},
		{name: "YAML raw NEL", in: yamlDoc("note=\"a\u0085b\""), code: bad, msg: "NEL"},
		{name: "YAML raw U+2028", in: yamlDoc("note=\"a\u2028b\""), code: bad, msg: "U+2028"},
		{name: "YAML raw DEL", in: yamlDoc("note=\"a\x7fb\""), code: bad},

		// Document structure.
		{name: "two documents", in: yamlDoc() + "---\n" + yamlDoc(), code: bad, msg: "more than one"},
		{name: "empty second document", in: yamlDoc() + "---\n", code: bad, msg: "more than one"},
		{name: "top-level sequence", in: "- version\n- 1\n", code: bad, msg: "mapping"},
		{name: "top-level JSON array", in: "[" + baseJSON + "]", code: bad, msg: "mapping"},
		{name: "top-level scalar", in: "hello\n", code: bad, msg: "mapping"},
		{name: "YAML syntax error", in: "version: 1\n  id: [\n", code: bad, msg: "YAML"},
		{name: "JSON trailing data", in: baseJSON + " x", code: bad},
		{name: "YAML directive", in: "%YAML 1.2\n---\n" + yamlDoc(), code: bad},
		{name: "unknown field", in: yamlDoc("extra=1"), code: bad, msg: `unknown field "extra"`},
		{name: "unknown long field", in: strings.Replace(baseJSON, `"cwd"`, `"`+long(1000)+`": 1, "cwd"`, 1), code: bad, msg: "unknown field"},
		{name: "member name too long", in: strings.Replace(baseJSON, `"cwd"`, `"`+long(MaxKeyLen+1)+`": 1, "cwd"`, 1), code: bad, msg: "longer than 1024 characters"},
		{name: "member name too long YAML", in: yamlDoc(long(MaxKeyLen+1) + "=1"), code: bad, msg: "longer than 1024 characters"},
		{name: "deep flow YAML", in: yamlDoc("note=" + strings.Repeat("[", 30000)), code: bad, msg: "nested more than 8 deep"},
		{name: "deep flow YAML, error at the end", in: yamlDoc("note="+strings.Repeat("[", 100)+strings.Repeat("]", 100)) + "x: ]\n", code: bad, msg: "nested more than 8 deep"},
		{name: "deep block YAML", in: yamlDoc("note=\n" + strings.Repeat("- ", 30000) + "x"), code: bad, msg: "nested more than 8 deep"},
		{name: "upper-case field", in: yamlDoc("-version", "Version=1"), code: bad, msg: "unknown field"},
		{name: "duplicate top-level key", in: yamlDoc() + "note: again\n", code: bad, field: "note", msg: "duplicate"},
		{name: "duplicate key quoted differently", in: yamlDoc() + "\"note\": again\n", code: bad, msg: "duplicate"},
		{name: "duplicate env key", in: yamlDoc("env={A: " + secret + ", A: " + secret + "}"), code: bad, field: `env["A"]`, msg: "duplicate"},
		{name: "duplicate JSON key", in: strings.Replace(baseJSON, `"cwd": "src"`, `"cwd": "src", "cwd": "x"`, 1), code: bad, field: "cwd", msg: "duplicate"},
		{name: "duplicate JSON env key", in: strings.Replace(baseJSON, `"GIT_PAGER": "cat"`, `"GIT_PAGER": "cat", "LANG": "x"`, 1), code: bad, field: `env["LANG"]`, msg: "duplicate"},
		{name: "billion laughs", in: billionLaughs, code: bad, msg: "anchors"},
		{name: "anchor", in: yamlDoc("note=&n hello"), code: bad, field: "note", msg: "anchors"},
		{name: "anchor on mapping", in: yamlDoc("env=&e {A: b}"), code: bad, msg: "anchors"},
		{name: "alias", in: "x: &a 1\n" + yamlDoc("note=*a"), code: bad, msg: "anchors"},
		{name: "merge key", in: yamlDoc("env={<<: {A: b}}"), code: bad, msg: "merge"},
		{name: "merge key at top", in: yamlDoc("<<={note: x}"), code: bad, msg: "merge"},
		{name: "tag !!binary", in: yamlDoc("-stdin", "stdin_base64=!!binary AP8Q"), code: bad, msg: "tags"},
		{name: "tag !!float", in: yamlDoc("timeout=!!float 60"), code: bad, msg: "tags"},
		{name: "tag !!int", in: yamlDoc("timeout=!!int 60"), code: bad, msg: "tags"},
		{name: "tag !!str", in: yamlDoc("note=!!str x"), code: bad, msg: "tags"},
		{name: "tag !custom", in: yamlDoc("note=!custom x"), code: bad, msg: "tags"},
		{name: "non-specific tag", in: yamlDoc("timeout=! 60"), code: bad, field: "timeout", msg: "tags"},
		{name: "non-specific tag on sequence", in: yamlDoc("argv=! [ls]"), code: bad, field: "argv", msg: "tags"},
		{name: "non-specific tag on key", in: yamlDoc() + "! extra: 1\n", code: bad, msg: "tags"},
		{name: "non-specific tag after multibyte", in: yamlDoc("env={\u00e9\u00e9: ! x}"), code: bad, msg: "tags"},
		{name: "verbatim tag", in: yamlDoc("note=!<tag:yaml.org,2002:str> x"), code: bad, msg: "tags"},
		{name: "TAG directive", in: "%TAG !e! tag:example.com,2000:\n---\n" + yamlDoc("note=!e!x y"), code: bad, msg: "tags"},
		{name: "bang inside strings is fine", in: yamlDoc(`argv=[echo, "!", 'a!b', c!]`, "note=hi!")},
		{name: "float", in: yamlDoc("timeout=1.5"), code: bad, field: "timeout", msg: "floating-point"},
		{name: "float exponent", in: yamlDoc("timeout=1e3"), code: bad, msg: "floating-point"},
		{name: "float inf", in: yamlDoc("timeout=.inf"), code: bad, msg: "floating-point"},
		{name: "float nan", in: yamlDoc("timeout=.nan"), code: bad, msg: "floating-point"},
		{name: "JSON float", in: strings.Replace(baseJSON, `"timeout": 60`, `"timeout": 60.0`, 1), code: bad, field: "timeout", msg: "floating-point"},
		{name: "JSON exponent", in: strings.Replace(baseJSON, `"timeout": 60`, `"timeout": 6e1`, 1), code: bad, msg: "floating-point"},
		{name: "huge integer", in: yamlDoc("timeout=99999999999999999999"), code: bad},
		{name: "integer beyond 2^53", in: yamlDoc("timeout=9007199254740992"), code: bad, msg: "2^53"},
		{name: "JSON integer beyond 2^53", in: strings.Replace(baseJSON, `"timeout": 60`, `"timeout": 9007199254740993`, 1), code: bad, msg: "2^53"},
		{name: "hex integer", in: yamlDoc("timeout=0x3c"), code: bad, msg: "decimal"},
		{name: "octal integer", in: yamlDoc("timeout=0o74"), code: bad, msg: "decimal"},
		{name: "leading zero integer", in: yamlDoc("timeout=060"), code: bad, msg: "decimal"},
		{name: "plus integer", in: yamlDoc("timeout=+60"), code: bad, msg: "decimal"},
		{name: "underscore integer", in: yamlDoc("timeout=6_0"), code: bad},
		{name: "null", in: yamlDoc("note=null"), code: bad, field: "note", msg: "null"},
		{name: "tilde null", in: yamlDoc("note=~"), code: bad, msg: "null"},
		{name: "empty value null", in: yamlDoc("note="), code: bad, msg: "null"},
		{name: "null in argv", in: yamlDoc("argv=[ls, null]"), code: bad, field: "argv[1]", msg: "null"},
		{name: "null env value", in: yamlDoc("env={A: }"), code: bad, msg: "null"},
		{name: "JSON null", in: strings.Replace(baseJSON, `"cwd": "src"`, `"cwd": null`, 1), code: bad, field: "cwd", msg: "null"},
		{name: "depth 8 ok structurally", in: yamlDoc("note=[[[[[[[x]]]]]]]"), code: bad, field: "note", msg: "must be a string"},
		{name: "depth 9", in: yamlDoc("note=[[[[[[[[x]]]]]]]]"), code: bad, msg: "nested more than 8"},
		{name: "depth 9 JSON", in: strings.Replace(baseJSON, `"cwd": "src"`, `"cwd": [[[[[[[["x"]]]]]]]]`, 1), code: bad, msg: "nested more than 8"},
		{name: "deep nesting", in: yamlDoc("note=" + strings.Repeat("[", 5000) + strings.Repeat("]", 5000)), code: bad, msg: "nested"},
		{name: "deep nesting JSON", in: "{\"a\":" + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}", code: bad, msg: "nested"},
		{name: "too many nodes", in: yamlDoc("argv=" + flowList(MaxNodes, "a")), code: bad, msg: "more than 20000 values"},
		{name: "too many nodes JSON", in: strings.Replace(baseJSON, `"cwd": "src"`, `"cwd": `+flowList(MaxNodes, "1"), 1), code: bad, msg: "more than 20000 values"},
		{name: "non-string key", in: yamlDoc() + "1: x\n", code: bad, msg: "member names must be strings"},
		{name: "bool key", in: yamlDoc() + "true: x\n", code: bad, msg: "member names must be strings"},
		{name: "complex key", in: yamlDoc() + "? [a]\n: x\n", code: bad, msg: "member names must be strings"},
		{name: "null key", in: yamlDoc() + "~: x\n", code: bad, msg: "null"},

		// Fields.
		{name: "version 2", in: yamlDoc("version=2"), code: bad, field: "version", msg: "unsupported"},
		{name: "version string", in: yamlDoc(`version="1"`), code: bad, field: "version", msg: "integer"},
		{name: "version missing", in: yamlDoc("-version"), code: bad, field: "version", msg: "missing"},
		{name: "id upper-case", in: yamlDoc("id=0F8FAD5B-D9CB-469F-A165-70867728950E"), code: bad, field: "id", msg: "UUID"},
		{name: "id braces", in: yamlDoc("id={0f8fad5b-d9cb-469f-a165-70867728950e}"), code: bad},
		{name: "id braces quoted", in: yamlDoc(`id="{0f8fad5b-d9cb-469f-a165-70867728950e}"`), code: bad, field: "id", msg: "UUID"},
		{name: "id short", in: yamlDoc("id=0f8fad5b-d9cb-469f-a165-70867728950"), code: bad, field: "id", msg: "UUID"},
		{name: "id long", in: yamlDoc("id=0f8fad5b-d9cb-469f-a165-70867728950ee"), code: bad, field: "id", msg: "UUID"},
		{name: "id no dashes", in: yamlDoc("id=0f8fad5bd9cb469fa16570867728950e"), code: bad, field: "id", msg: "UUID"},
		{name: "id urn", in: yamlDoc("id=urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"), code: bad, field: "id", msg: "UUID"},
		{name: "id not hex", in: yamlDoc("id=0f8fad5b-d9cb-469f-a165-70867728950g"), code: bad, field: "id", msg: "UUID"},
		{name: "id missing", in: yamlDoc("-id"), code: bad, field: "id", msg: "missing"},
		{name: "created_at no zone", in: yamlDoc("created_at=2026-01-02T03:04:05"), code: bad, field: "created_at", msg: "RFC 3339"},
		{name: "created_at lower-case", in: yamlDoc("created_at=2026-01-02t03:04:05z"), code: bad, field: "created_at"},
		{name: "created_at space", in: yamlDoc(`created_at="2026-01-02 03:04:05Z"`), code: bad, field: "created_at"},
		{name: "created_at date only", in: yamlDoc("created_at=2026-01-02"), code: bad, field: "created_at"},
		{name: "created_at 10 fraction digits", in: yamlDoc("created_at=2026-01-02T03:04:05.1234567890Z"), code: bad, field: "created_at"},
		{name: "created_at Feb 30", in: yamlDoc("created_at=2026-02-30T03:04:05Z"), code: bad, field: "created_at", msg: "not a valid"},
		{name: "created_at hour 24", in: yamlDoc("created_at=2026-01-02T24:00:00Z"), code: bad, field: "created_at"},
		{name: "created_at offset 24h", in: yamlDoc("created_at=2026-01-02T03:04:05+24:00"), code: bad, field: "created_at"},
		{name: "created_at offset 60m", in: yamlDoc("created_at=2026-01-02T03:04:05+23:60"), code: bad, field: "created_at"},
		{name: "created_at leap second", in: yamlDoc("created_at=2026-12-31T23:59:60Z"), code: bad, field: "created_at"},
		{name: "created_at offset max", in: yamlDoc("created_at=2026-01-02T03:04:05-23:59")},
		{name: "created_at number", in: yamlDoc("created_at=1767323045"), code: bad, field: "created_at", msg: "string"},
		{name: "nonce 21", in: yamlDoc("nonce=" + strings.Repeat("a", 21)), code: bad, field: "nonce"},
		{name: "nonce 129", in: yamlDoc("nonce=" + strings.Repeat("a", 129)), code: bad, field: "nonce"},
		{name: "nonce base64 std", in: yamlDoc("nonce=q3Jx0bTfWv1kY8mZp2sN4g+/"), code: bad, field: "nonce"},
		{name: "nonce padded", in: yamlDoc("nonce=q3Jx0bTfWv1kY8mZp2sN4g=="), code: bad, field: "nonce"},
		{name: "sandbox upper-case", in: yamlDoc("sandbox=Agent"), code: bad, field: "sandbox"},
		{name: "sandbox leading dash", in: yamlDoc("sandbox=-agent"), code: bad, field: "sandbox"},
		{name: "sandbox 64", in: yamlDoc("sandbox=" + strings.Repeat("a", 64)), code: bad, field: "sandbox"},
		{name: "sandbox empty", in: yamlDoc(`sandbox=""`), code: bad, field: "sandbox"},
		{name: "sandbox path", in: yamlDoc("sandbox=../x"), code: bad, field: "sandbox"},
		{name: "argv empty", in: yamlDoc("argv=[]"), code: bad, field: "argv", msg: "empty"},
		{name: "argv missing", in: yamlDoc("-argv"), code: bad, field: "argv", msg: "missing"},
		{name: "argv string", in: yamlDoc("argv=ls -l"), code: bad, field: "argv", msg: "sequence"},
		{name: "argv[0] empty", in: yamlDoc(`argv=["", x]`), code: bad, field: "argv[0]", msg: "empty"},
		{name: "argv integer entry", in: yamlDoc("argv=[sleep, 1]"), code: bad, field: "argv[1]", msg: "string"},
		{name: "argv nested", in: yamlDoc("argv=[ls, [a]]"), code: bad, field: "argv[1]", msg: "string"},
		{name: "argv 1025", in: yamlDoc("argv=" + flowList(MaxArgs+1, "a")), code: bad, field: "argv", msg: "1024"},
		{name: "argv entry too long", in: yamlDoc("argv=[" + long(MaxArgBytes+1) + "]"), code: bad, field: "argv[0]", msg: "65536"},
		{name: "argv NUL escape", in: yamlDoc(`argv=[ls, "a\0b"]`), code: bad, field: "argv[1]", msg: "NUL"},
		{name: "argv NUL JSON escape", in: strings.Replace(baseJSON, `"--short"`, `"-\u0000"`, 1), code: bad, field: "argv[2]", msg: "NUL"},
		{name: "cwd too long", in: yamlDoc("cwd=" + long(MaxCwdBytes+1)), code: bad, field: "cwd"},
		{name: "cwd NUL", in: yamlDoc(`cwd="a\0"`), code: bad, field: "cwd", msg: "NUL"},
		{name: "cwd integer", in: yamlDoc("cwd=1"), code: bad, field: "cwd"},
		{name: "env list", in: yamlDoc("env=[A=b]"), code: bad, field: "env", msg: "mapping"},
		{name: "env 257", in: yamlDoc("env=" + flowEnv(MaxEnv+1)), code: bad, field: "env", msg: "256"},
		{name: "env bad name digit", in: yamlDoc("env={1A: " + secret + "}"), code: bad, field: `env["1A"]`, msg: "variable names"},
		{name: "env bad name dash", in: yamlDoc("env={A-B: " + secret + "}"), code: bad, field: `env["A-B"]`},
		{name: "env bad name =", in: yamlDoc(`env={"A=B": ` + secret + "}"), code: bad},
		{name: "env empty name", in: yamlDoc(`env={"": ` + secret + "}"), code: bad},
		{name: "env integer value", in: yamlDoc("env={A: 1}"), code: bad, field: `env["A"]`, msg: "string"},
		{name: "env NUL value", in: yamlDoc(`env={A: "` + secret + `\0"}`), code: bad, field: `env["A"]`, msg: "NUL"},
		{name: "env integer name", in: yamlDoc("env={1: " + secret + "}"), code: bad, msg: "member names must be strings"},
		{name: "stdin and stdin_base64", in: yamlDoc("stdin_base64=AAAA"), code: bad, field: "stdin_base64", msg: "exclusive"},
		{name: "stdin too long", in: yamlDoc("stdin=" + long(MaxStdin+1)), code: bad, field: "stdin"},
		{name: "stdin NUL", in: yamlDoc(`stdin="` + secret + `\0"`), code: bad, field: "stdin", msg: "NUL"},
		{name: "stdin integer", in: yamlDoc("stdin=1"), code: bad, field: "stdin"},
		{name: "stdin_base64 unpadded", in: yamlDoc("-stdin", "stdin_base64=AP8"), code: bad, field: "stdin_base64", msg: "base64"},
		{name: "stdin_base64 url alphabet", in: yamlDoc("-stdin", "stdin_base64=AP_-"), code: bad, field: "stdin_base64"},
		{name: "stdin_base64 newline", in: yamlDoc("-stdin", `stdin_base64="AP8Q\nAP8Q"`), code: bad, field: "stdin_base64"},
		{name: "stdin_base64 non-canonical", in: yamlDoc("-stdin", "stdin_base64=AP9="), code: bad, field: "stdin_base64"},
		{name: "stdin_base64 too long", in: yamlDoc("-stdin", "stdin_base64="+base64.StdEncoding.EncodeToString(make([]byte, MaxStdin+1))), code: bad, field: "stdin_base64", msg: "more than"},
		{name: "timeout 0", in: yamlDoc("timeout=0"), code: bad, field: "timeout"},
		{name: "timeout negative", in: yamlDoc("timeout=-1"), code: bad, field: "timeout"},
		{name: "timeout too big", in: yamlDoc("timeout=86401"), code: bad, field: "timeout"},
		{name: "timeout string", in: yamlDoc(`timeout="60"`), code: bad, field: "timeout", msg: "integer"},
		{name: "timeout duration", in: yamlDoc("timeout=60s"), code: bad, field: "timeout", msg: "integer"},
		{name: "requires_confirm yes", in: yamlDoc("requires_confirm=yes"), code: bad, field: "requires_confirm", msg: "boolean"},
		{name: "requires_confirm 1", in: yamlDoc("requires_confirm=1"), code: bad, field: "requires_confirm"},
		{name: "note too long", in: yamlDoc("note=" + long(MaxNoteBytes+1)), code: bad, field: "note"},
		{name: "note mapping", in: yamlDoc("note={a: b}"), code: bad, field: "note"},

		// Signature.
		{name: "hmac missing", in: yamlDoc("-hmac"), code: hfail, field: "hmac", msg: "missing"},
		{name: "hmac upper-case", in: yamlDoc("hmac=" + strings.Repeat("AB", 32)), code: hfail, field: "hmac"},
		{name: "hmac short", in: yamlDoc("hmac=" + strings.Repeat("a", 63)), code: hfail, field: "hmac"},
		{name: "hmac long", in: yamlDoc("hmac=" + strings.Repeat("a", 65)), code: hfail, field: "hmac"},
		{name: "hmac integer", in: yamlDoc("hmac=1234"), code: hfail, field: "hmac"},
		{name: "hmac missing and bad field", in: yamlDoc("-hmac", "timeout=0"), code: bad, field: "timeout"},
	}
}

func TestParseRequestTable(t *testing.T) {
	for _, c := range parseCases() {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r, canonical, err := ParseRequest([]byte(c.in))
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if c.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r == nil || len(canonical) == 0 || bytes.Contains(canonical, []byte(`"hmac"`)) {
					t.Fatalf("r=%v canonical=%q", r, canonical)
				}
				if got, err := CanonicalizeJSON(canonical); err != nil || !bytes.Equal(got, canonical) {
					t.Errorf("canonical bytes are not a fixed point: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %s", c.code)
			}
			e := asError(t, err)
			if e.Code != c.code {
				t.Errorf("code %q, want %q (%v)", e.Code, c.code, err)
			}
			if c.field != "" && e.Field != c.field {
				t.Errorf("field %q, want %q (%v)", e.Field, c.field, err)
			}
			if c.msg != "" && !strings.Contains(e.Error(), c.msg) {
				t.Errorf("error %q does not mention %q", e.Error(), c.msg)
			}
			msg := e.Error()
			if strings.Contains(msg, "SECRET") || len(msg) > 250 || strings.Contains(msg, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx") {
				t.Errorf("error echoes too much: %.300q", msg)
			}
		})
	}
}

func TestParseRequestFields(t *testing.T) {
	r, _, err := ParseRequest([]byte(yamlDoc("created_at=2026-01-02T08:34:05.25+05:30")))
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{
		Version: 1, ID: "0f8fad5b-d9cb-469f-a165-70867728950e",
		CreatedAt:    time.Date(2026, 1, 2, 3, 4, 5, 250e6, time.UTC),
		CreatedAtRaw: "2026-01-02T08:34:05.25+05:30",
		Nonce:        "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19", Sandbox: "agent-1",
		Argv: []string{"git", "status", "--short"}, Cwd: "src",
		Env:   map[string]string{"LANG": "C.UTF-8", "GIT_PAGER": "cat"},
		Stdin: []byte("hello\n"), Timeout: 60 * time.Second, Note: "check the tree",
		HMAC: strings.Repeat("ab", 32),
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	r, _, err = ParseRequest([]byte(yamlDoc("-stdin", "stdin_base64=AP8Q", "env={}", "requires_confirm=true")))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Stdin, []byte{0, 0xff, 0x10}) || r.Env != nil || !r.RequiresConfirm {
		t.Errorf("stdin %q env %v confirm %v", r.Stdin, r.Env, r.RequiresConfirm)
	}
}

func TestErrorPositions(t *testing.T) {
	in := yamlDoc("timeout=0") // timeout is on line 10, its value at column 10
	_, _, err := ParseRequest([]byte(in))
	e := asError(t, err)
	if e.Field != "timeout" || e.Line != 10 || e.Column != 10 {
		t.Errorf("got %q at %d:%d, want timeout at 10:10", e.Field, e.Line, e.Column)
	}
	json := strings.Replace(baseJSON, `"timeout": 60`, `"timeout": 0`, 1)
	_, _, err = ParseRequest([]byte(json))
	e = asError(t, err)
	if e.Field != "timeout" || e.Line != 11 || e.Column != 14 {
		t.Errorf("JSON: got %q at %d:%d, want timeout at 11:14", e.Field, e.Line, e.Column)
	}
	if !strings.Contains(e.Error(), "timeout (line 11:14)") {
		t.Errorf("message %q lacks the position", e.Error())
	}
}

// TestSyntaxErrorPositions: a YAML syntax error names the line a person
// should look at (the unclosed bracket's, the badly indented key's), not
// the start of the enclosing block as the reader alone would.
func TestSyntaxErrorPositions(t *testing.T) {
	for _, c := range []struct {
		name, text string
		line, col  int
		msg        string
	}{
		{"unclosed [", "version: 1\nid: x\nargv: [git, status\nnonce: y\n", 3, 7, "unclosed ["},
		{"bad indent", "version: 1\nenv:\n  A: b\n   C: d\n", 4, 5, "indentation"},
		{"unclosed quote", "version: 1\nnote: \"never\n", 2, 7, "double-quoted"},
	} {
		_, _, err := ParseRequest([]byte(c.text))
		e := asError(t, err)
		if e.Code != CodeBadRequest || e.Line != c.line || e.Column != c.col || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%s: got %s %q at %d:%d, want %q at %d:%d", c.name, e.Code, e.Msg, e.Line, e.Column, c.msg, c.line, c.col)
		}
	}
}

// TestAliasBomb checks the billion laughs costs next to nothing: aliases are
// never expanded.
func TestAliasBomb(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range 10 {
		if _, _, err := ParseRequest([]byte(billionLaughs)); err == nil {
			t.Fatal("accepted")
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 10<<20 {
		t.Errorf("10 parses allocated %d bytes", alloc)
	}
	if elapsed > time.Second {
		t.Errorf("10 parses took %v", elapsed)
	}
}

func TestOversizeRefusedBeforeParsing(t *testing.T) {
	in := []byte("[" + strings.Repeat("0,", 3<<19) + "0]") // 3 MiB of flow sequence
	start := time.Now()
	_, _, err := ParseRequest(in)
	if err == nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}

// TestFormatsAgree: JSON, YAML block and flow style, quoting and member
// order change nothing in the canonical bytes.
func TestFormatsAgree(t *testing.T) {
	_, want, err := ParseRequest([]byte(baseJSON))
	if err != nil {
		t.Fatal(err)
	}
	variants := []string{
		yamlDoc(),
		reverseLines(yamlDoc()),
		`{"hmac": "` + strings.Repeat("ab", 32) + `", "note": "check the tree", "requires_confirm": false, "timeout": 60, "stdin": "hello\n",
		  "env": {"GIT_PAGER": "cat", "LANG": "C.UTF-8"}, "cwd": "src", "argv": ["git", "status", "--short"], "sandbox": "agent-1",
		  "nonce": "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19", "created_at": "2026-01-02T03:04:05Z", "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "version": 1}`,
		`version: 1
id: '0f8fad5b-d9cb-469f-a165-70867728950e'
created_at: "2026-01-02T03:04:05Z"
nonce: "9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19"
sandbox: 'agent-1'
argv:
  - git
  - "status"
  - '--short'
cwd: "src"
env:
  GIT_PAGER: 'cat'
  "LANG": C.UTF-8
stdin: |
  hello
timeout: 60   # seconds
requires_confirm: FALSE
note: >-
  check
  the tree
hmac: ` + strings.Repeat("ab", 32) + "\n",
		"{version: 1, id: 0f8fad5b-d9cb-469f-a165-70867728950e, created_at: 2026-01-02T03:04:05Z, nonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19, " +
			"sandbox: agent-1, argv: [git, status, --short], cwd: src, env: {LANG: C.UTF-8, GIT_PAGER: cat}, stdin: \"hello\\n\", " +
			"timeout: 60, requires_confirm: false, note: check the tree, hmac: " + strings.Repeat("ab", 32) + "}",
		strings.ReplaceAll(baseJSON, "\n", "\r\n"),
		strings.Replace(baseJSON, `"check the tree"`, `"\u0063heck\u0020the tree"`, 1),
	}
	for i, v := range variants {
		_, got, err := ParseRequest([]byte(v))
		if err != nil {
			t.Errorf("variant %d: %v", i, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("variant %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// A change of value does change them.
	_, other, err := ParseRequest([]byte(yamlDoc("note=check the tree.")))
	if err != nil || bytes.Equal(other, want) {
		t.Errorf("changed note: %v, same canonical bytes", err)
	}
}

func reverseLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestParseTeardown(t *testing.T) {
	in := "version: 1\nid: 0f8fad5b-d9cb-469f-a165-70867728950e\ncreated_at: 2026-01-02T03:04:05Z\nnonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19\nsandbox: agent-1\nhmac: '" + strings.Repeat("0", 64) + "'\n"
	td, canonical, err := ParseTeardown([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"created_at":"2026-01-02T03:04:05Z","id":"0f8fad5b-d9cb-469f-a165-70867728950e","nonce":"9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19","sandbox":"agent-1","version":1}`
	if string(canonical) != want || td.ID != "0f8fad5b-d9cb-469f-a165-70867728950e" || td.HMAC != strings.Repeat("0", 64) ||
		!td.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("got %+v %s", td, canonical)
	}
	for _, c := range []struct{ name, in, code string }{
		{"argv", in + "argv: [ls]\n", bad},
		{"no hmac", strings.Replace(in, "hmac:", "x-hmac:", 1), bad},
		{"hmac missing", in[:strings.Index(in, "hmac:")], hfail},
		{"bad id", strings.Replace(in, "0f8fad5b", "0F8FAD5B", 1), bad},
		{"no nonce", strings.Replace(in, "nonce: 9b2f0c6e1d4a4f3b8c7e6a5d4c3b2a19\n", "", 1), bad},
		{"request", yamlDoc(), bad},
	} {
		_, _, err := ParseTeardown([]byte(c.in))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if e := asError(t, err); e.Code != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
}

// TestBangPositions: a '!' in text never passes for a tag, whatever comes
// before it on the line (tabs, multi-byte characters, CR line ends, quoted
// strings spanning lines).
func TestBangPositions(t *testing.T) {
	for i, in := range []string{
		yamlDoc("note=\"\u00e9\u00e9\U0001F600 !\"", "argv=[\"\u00e9!\", '!', a!]"),
		yamlDoc("note=\"a\n  b ! c\n  !d\"", "argv=[\"\t!\", \"x\"]"),
		strings.ReplaceAll(yamlDoc("note=\"x\n  !y\""), "\n", "\r\n"),
		strings.ReplaceAll(yamlDoc("note=\"x\n  !y\""), "\n", "\r"),
		yamlDoc("note=|\n  !literal\n  !block", "argv=\n  - \"!\"\n  - '\u00e9 !'\n  - a!b"),
		yamlDoc("env={A: \"!\", B: 'x!'}", "argv=[\t\"!\",\t'!']"),
		"# !comment\n" + yamlDoc("note=x # !comment"),
	} {
		if _, _, err := ParseRequest([]byte(in)); err != nil {
			t.Errorf("variant %d refused: %v\n%s", i, err, in)
		}
	}
	for i, in := range []string{
		yamlDoc("note=\"\u00e9\u00e9\U0001F600\"", "argv=[\"\u00e9\", ! x]"),
		strings.ReplaceAll(yamlDoc("note=\"x\n  y\"", "cwd=! src"), "\n", "\r\n"),
		strings.ReplaceAll(yamlDoc("note=\"x\n  y\"", "cwd=! src"), "\n", "\r"),
		yamlDoc("note=|\n  !literal", "argv=\n  - ! a"),
		yamlDoc("argv=[\t! a]"),
	} {
		_, _, err := ParseRequest([]byte(in))
		if err == nil || !strings.Contains(err.Error(), "tags are not allowed") {
			t.Errorf("variant %d: %v, want a tag refusal\n%s", i, err, in)
		}
	}
}

// Member names count towards MaxNodes in JSON as in YAML.
func TestNodeCountAgrees(t *testing.T) {
	build := func(n int) map[string]string {
		var y, j strings.Builder
		j.WriteString(`{"env": {`)
		y.WriteString("env: {")
		for i := range n {
			if i > 0 {
				j.WriteString(",")
				y.WriteString(",")
			}
			fmt.Fprintf(&j, `"V%d":"x"`, i)
			fmt.Fprintf(&y, "V%d: x", i)
		}
		j.WriteString("}}")
		y.WriteString("}\n")
		return map[string]string{"JSON": j.String(), "YAML": y.String()}
	}
	// The top mapping, "env", the env mapping: 3 values, then 2 per entry.
	for n, want := range map[int]string{(MaxNodes - 3) / 2: "more than 256 entries", (MaxNodes-3)/2 + 1: "more than 20000 values"} {
		for name, in := range build(n) {
			_, _, err := ParseRequest([]byte(in))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s, %d entries: %v, want %q", name, n, err, want)
			}
		}
	}
}
