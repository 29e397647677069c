package descriptor

import (
	"strings"
)

// The inputs of docs/protocol-vectors.json. Each descriptor vector names
// the outcome it must have; `go test ./descriptor -run TestProtocolVectors
// -update` computes the canonical bytes and signatures, checks every
// outcome against these expectations and rewrites the file.

// vecID is the worked example's request id (docs/protocol.md §4.4).
const vecID = "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"

// vecNow is the server's clock for the freshness check of every vector.
const vecNow = "2026-03-01T12:02:00Z"

// hmacSlot in a template is replaced by the signature of the file's
// canonical form (under the spec's key, or the vector key).
const hmacSlot = "{{hmac}}"

type descSpec struct {
	name string
	kind string // "request" (default) or "teardown"
	// fileName defaults to vecID + ".json".
	fileName string
	// relayedFor is the sandbox the bridge relays for (default build-agent).
	relayedFor string
	text       string
	// raw, when set, is the file instead of text (bytes that are not UTF-8).
	raw []byte
	// signWith signs with another key than the vectors' one.
	signWith []byte
	// after edits the signed file (tampering).
	after func(string) string
	want  string // "accepted" or the refusal code
	why   string
}

// exampleYAML is the worked example of docs/protocol.md §4.4.
const exampleYAML = `version: 1
id: 5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84
created_at: "2026-03-01T12:00:00Z"
nonce: q3Jx0bTfWv1kY8mZp2sN4g
sandbox: build-agent
argv: [git, log, --oneline, -n, "5"]
cwd: repo
env:
  GIT_PAGER: cat
  LC_ALL: C
timeout: 120
note: show recent commits
hmac: "{{hmac}}"
`

// request returns a JSON request with created_at and extra members (JSON
// text, e.g. `"cwd":"x"`) added.
func request(createdAt string, extra ...string) string {
	members := []string{`"version":1`, `"id":"` + vecID + `"`, `"created_at":"` + createdAt + `"`,
		`"nonce":"Zx9Kq2Lm4Np6Rs8Tu0Vw1y"`, `"sandbox":"build-agent"`, `"argv":["/usr/bin/git","status"]`}
	members = append(members, extra...)
	members = append(members, `"hmac":"{{hmac}}"`)
	return "{" + strings.Join(members, ",") + "}\n"
}

func otherKey() []byte {
	k := testKey()
	k[31] ^= 0xff
	return k
}

var descSpecs = []descSpec{
	{name: "worked example, YAML", text: exampleYAML, want: "accepted",
		why: "docs/protocol.md §4.4; its hmac is cef49c7b…"},
	{name: "worked example, the JSON a writer produces",
		text: `{"argv":["git","log","--oneline","-n","5"],"created_at":"2026-03-01T12:00:00Z","cwd":"repo","env":{"GIT_PAGER":"cat","LC_ALL":"C"},"hmac":"{{hmac}}","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"q3Jx0bTfWv1kY8mZp2sN4g","note":"show recent commits","sandbox":"build-agent","timeout":120,"version":1}` + "\n",
		want: "accepted", why: "same canonical bytes and hmac as the YAML form"},
	{name: "worked example, flow YAML, members reordered, quoted differently",
		text: `{note: 'show recent commits', timeout: 120, env: {LC_ALL: "C", GIT_PAGER: 'cat'}, cwd: "repo", argv: ["git", 'log', --oneline, -n, '5'], sandbox: "build-agent", nonce: 'q3Jx0bTfWv1kY8mZp2sN4g', created_at: '2026-03-01T12:00:00Z', id: "5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84", version: 1, hmac: "{{hmac}}"}  # a comment makes it YAML` + "\n",
		want: "accepted", why: "not JSON (a comment), so read as YAML: same data, same canonical bytes"},
	{name: "JSON with whitespace, escapes and another member order",
		text: "{\n  \"hmac\" : \"{{hmac}}\",\n  \"version\": 1, \"id\": \"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84\",\n  \"sandbox\": \"build-agent\", \"nonce\": \"Zx9Kq2Lm4Np6Rs8Tu0Vw1y\",\n  \"created_at\": \"2026-03-01T12:01:00Z\",\n  \"argv\": [\"\\/usr\\/bin\\/git\", \"\\u0073tatus\"]\n}\n",
		want: "accepted", why: `"\/" and "\u0073" decode to "/" and "s": the canonical form is the data`},
	{name: "every optional member, text that JCS escapes",
		text: request("2026-03-01T12:01:00Z", `"cwd":"src/app"`, `"env":{"LANG":"C.UTF-8","A_1":""}`,
			`"stdin":"line one\n\ttab \"quoted\" back\\slash \u0001 \u001f é € 😀 \u2028"`, `"timeout":86400`,
			`"requires_confirm":true`, `"note":"ünïcödé </script> & ☃"`),
		want: "accepted", why: "controls as \\b \\t \\n \\f \\r or \\u00xx; everything else literal UTF-8, including U+2028 and /"},
	{name: "binary stdin as stdin_base64",
		text: request("2026-03-01T12:01:00Z", `"stdin_base64":"AAEC/w=="`, `"requires_confirm":false`, `"cwd":""`, `"env":{}`),
		want: "accepted", why: "empty optional members present in the file are signed as written"},
	{name: "reformatted after signing", text: request("2026-03-01T12:01:00Z", `"note":"n"`),
		after: func(s string) string {
			return strings.ReplaceAll(strings.Replace(s, `{"`, "{\n  \"", 1), `,"`, ",\n  \"")
		},
		want: "accepted", why: "the signature covers the data, not the bytes of the file"},
	{name: "teardown, the example of docs/protocol.md §5", kind: "teardown",
		text: `{"created_at":"2026-03-01T12:01:30Z","hmac":"{{hmac}}","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"Vb7mQ2xR9kLp4sT1wZ8nHc","sandbox":"build-agent","version":1}` + "\n",
		want: "accepted", why: "a teardown names the request it cancels"},

	// Freshness: [now - 5 min, now + 1 min], both ends inclusive.
	{name: "created exactly 5 minutes ago", text: request("2026-03-01T11:57:00Z"), want: "accepted", why: "the window's lower end is inclusive"},
	{name: "created 5 minutes and 1 second ago", text: request("2026-03-01T11:56:59Z"), want: "stale-request", why: "older than 5 minutes"},
	{name: "created exactly 1 minute ahead", text: request("2026-03-01T12:03:00Z"), want: "accepted", why: "the window's upper end is inclusive"},
	{name: "created 1 minute and 1 millisecond ahead", text: request("2026-03-01T12:03:00.001Z"), want: "stale-request", why: "more than 1 minute in the future"},
	{name: "created with an offset, fresh", text: request("2026-03-01T13:01:00+01:00"), want: "accepted", why: "12:01:00Z written with +01:00, signed as written"},
	{name: "stale teardown", kind: "teardown",
		text: `{"created_at":"2026-03-01T11:00:00Z","hmac":"{{hmac}}","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"Vb7mQ2xR9kLp4sT1wZ8nHc","sandbox":"build-agent","version":1}` + "\n",
		want: "stale-request", why: "teardowns have the same window"},

	// Signatures.
	{name: "tampered body", text: request("2026-03-01T12:01:00Z"),
		after: func(s string) string { return strings.Replace(s, `"status"`, `"push"`, 1) },
		want:  "hmac-fail", why: "argv changed after signing"},
	{name: "tampered teardown", kind: "teardown",
		text:  `{"created_at":"2026-03-01T12:01:30Z","hmac":"{{hmac}}","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"Vb7mQ2xR9kLp4sT1wZ8nHc","sandbox":"build-agent","version":1}` + "\n",
		after: func(s string) string { return strings.Replace(s, "Vb7m", "Vb7n", 1) },
		want:  "hmac-fail", why: "nonce changed after signing"},
	{name: "signed with another key", text: request("2026-03-01T12:01:00Z"), signWith: otherKey(),
		want: "hmac-fail", why: "a retired key, or another sandbox's, never verifies"},
	{name: "signed for another sandbox", relayedFor: "other-box", text: request("2026-03-01T12:01:00Z"),
		want: "hmac-fail", why: "sandbox names build-agent, the bridge relays for other-box"},
	{name: "hmac in upper case", text: request("2026-03-01T12:01:00Z"),
		after: func(s string) string {
			i := strings.Index(s, `"hmac":"`) + len(`"hmac":"`)
			return s[:i] + strings.ToUpper(s[i:i+64]) + s[i+64:]
		},
		want: "hmac-fail", why: "64 lower-case hex digits only"},
	{name: "hmac missing", text: strings.Replace(request("2026-03-01T12:01:00Z"), `,"hmac":"{{hmac}}"`, "", 1),
		want: "hmac-fail", why: "an unsigned file"},
	{name: "unsigned and malformed", text: `{"version":1,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84"}` + "\n",
		want: "bad-request", why: "a missing hmac is reported only when everything else is valid"},
	{name: "unicode normalisation is not applied", text: request("2026-03-01T12:01:00Z", `"note":"café"`),
		after: func(s string) string { return strings.Replace(s, "café", "cafe\u0301", 1) },
		want:  "hmac-fail", why: "é (U+00E9) and e + U+0301 are different data"},

	// Names and ids.
	{name: "file named for another id", fileName: "0f8fad5b-d9cb-469f-a165-70867728950e.json",
		text: request("2026-03-01T12:01:00Z"), want: "bad-request", why: "the id inside must equal the file name's"},
	{name: "YAML file name, JSON content", fileName: vecID + ".yaml", text: request("2026-03-01T12:01:00Z"),
		want: "accepted", why: "the extension does not decide the format"},
	{name: "id in upper case", text: strings.Replace(request("2026-03-01T12:01:00Z"), vecID, strings.ToUpper(vecID), 1),
		want: "bad-request", why: "ids are lower-case UUIDs"},

	// Malformed files.
	{name: "duplicate key, YAML", text: "version: 1\n" + strings.TrimPrefix(exampleYAML, "version: 1\n") + "version: 1\n",
		want: "bad-request", why: "no duplicate keys"},
	{name: "duplicate member, JSON", text: strings.Replace(request("2026-03-01T12:01:00Z"), `"argv"`, `"nonce":"Zx9Kq2Lm4Np6Rs8Tu0Vw1y","argv"`, 1),
		want: "bad-request", why: "no duplicate members, even with the same value"},
	{name: "YAML anchor and alias", text: strings.Replace(strings.Replace(exampleYAML, "cwd: repo", "cwd: &c repo", 1), "note: show recent commits", "note: *c", 1),
		want: "bad-request", why: "no anchors or aliases"},
	{name: "YAML tag", text: strings.Replace(exampleYAML, "cwd: repo", "cwd: !!str repo", 1), want: "bad-request", why: "no tags"},
	{name: "YAML merge key", text: strings.Replace(exampleYAML, "env:\n", "env:\n  <<: {A: b}\n", 1), want: "bad-request", why: "no merge keys"},
	{name: "two YAML documents", text: exampleYAML + "---\n", want: "bad-request", why: "exactly one document"},
	{name: "unquoted all-digit nonce", text: strings.Replace(exampleYAML, "q3Jx0bTfWv1kY8mZp2sN4g", "1234567890123456789012", 1),
		want: "bad-request", why: "a plain scalar of digits is an integer (here out of range)"},
	{name: "yes is a string", text: strings.Replace(exampleYAML, "timeout: 120", "requires_confirm: yes", 1),
		want: "bad-request", why: "requires_confirm must be a boolean; yes is a string in YAML 1.2"},
	{name: "float", text: request("2026-03-01T12:01:00Z", `"timeout":60.0`), want: "bad-request", why: "integers only"},
	{name: "exponent", text: request("2026-03-01T12:01:00Z", `"timeout":6e1`), want: "bad-request", why: "integers only"},
	{name: "null", text: request("2026-03-01T12:01:00Z", `"cwd":null`), want: "bad-request", why: "leave the member out instead"},
	{name: "unknown member", text: request("2026-03-01T12:01:00Z", `"shell":true`), want: "bad-request", why: "unknown members are refused"},
	{name: "extra member in a teardown", kind: "teardown",
		text: `{"argv":["/bin/true"],"created_at":"2026-03-01T12:01:30Z","hmac":"{{hmac}}","id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","nonce":"Vb7mQ2xR9kLp4sT1wZ8nHc","sandbox":"build-agent","version":1}` + "\n",
		want: "bad-request", why: "a teardown has exactly six members"},
	{name: "version 2", text: strings.Replace(request("2026-03-01T12:01:00Z"), `"version":1`, `"version":2`, 1), want: "bad-request", why: "only version 1"},
	{name: "stdin and stdin_base64", text: request("2026-03-01T12:01:00Z", `"stdin":"a"`, `"stdin_base64":"YQ=="`), want: "bad-request", why: "exclusive"},
	{name: "non-canonical base64", text: request("2026-03-01T12:01:00Z", `"stdin_base64":"YR=="`), want: "bad-request", why: "strict, padded, canonical"},
	{name: "env name with a dash", text: request("2026-03-01T12:01:00Z", `"env":{"A-B":"x"}`), want: "bad-request", why: "names match [A-Za-z_][A-Za-z0-9_]*"},
	{name: "empty argv[0]", text: strings.Replace(request("2026-03-01T12:01:00Z"), `"/usr/bin/git"`, `""`, 1), want: "bad-request", why: "argv[0] not empty"},
	{name: "sandbox name with a capital", text: strings.Replace(request("2026-03-01T12:01:00Z"), `"build-agent"`, `"Build-agent"`, 1), want: "bad-request", why: "sandbox names match ^[a-z0-9][a-z0-9-]{0,62}$"},
	{name: "short nonce", text: strings.Replace(request("2026-03-01T12:01:00Z"), "Zx9Kq2Lm4Np6Rs8Tu0Vw1y", "Zx9Kq2Lm4Np6Rs8Tu0Vw1", 1), want: "bad-request", why: "22 characters at least"},
	{name: "created_at in lower case", text: request("2026-03-01t12:01:00z"), want: "bad-request", why: "upper-case T and Z"},
	{name: "created_at on 30 February", text: request("2026-02-30T12:01:00Z"), want: "bad-request", why: "a real date"},
	{name: "byte-order mark", text: "\ufeff" + request("2026-03-01T12:01:00Z"), want: "bad-request", why: "no BOM"},
	{name: "NUL byte", text: request("2026-03-01T12:01:00Z") + "\x00", want: "bad-request", why: "no NUL anywhere"},
	{name: "not UTF-8", raw: []byte("version: 1\nnote: \xff\xfe\n"), want: "bad-request", why: "UTF-8 only (this file is given as file_base64)"},
	{name: "empty file", text: "", want: "bad-request", why: "not empty"},
	{name: "top level a sequence", text: "- version: 1\n", want: "bad-request", why: "one mapping"},
	{name: "nested 9 deep", text: request("2026-03-01T12:01:00Z", `"env":{"A":{"B":{"C":{"D":{"E":{"F":{"G":{"H":"x"}}}}}}}}`), want: "bad-request", why: "at most 8 levels"},
	{name: "U+2028 literal in YAML", text: strings.Replace(exampleYAML, "note: show recent commits", "note: \"a\u2028b\"", 1), want: "bad-request", why: "YAML readers disagree on U+0085, U+2028, U+2029: escape them"},
}

// nameSpecs are file names in requests/ and teardowns/: valid ones are
// relayed, the others deleted unopened.
var nameSpecs = []struct {
	name  string
	valid bool
}{
	{vecID + ".json", true},
	{vecID + ".yaml", true},
	{"00000000-0000-0000-0000-000000000000.json", true},
	{strings.ToUpper(vecID) + ".json", false},
	{vecID + ".JSON", false},
	{vecID + ".yml", false},
	{vecID, false},
	{vecID + ".json.tmp", false},
	{".tmp-" + vecID + ".json", false},
	{vecID + ".json\n", false},
	{"5b0c5a4e3f8d4c2a9e710d6f3b2a1c84.json", false},
	{"../" + vecID + ".json", false},
	{"{5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84}.json", false},
}

// respSpecs are response files a reader must accept or refuse.
var respSpecs = []struct {
	name, text string
	valid      bool
}{
	{"exit", `{"audit_id":"A000000000412","duration_ms":38,"exit_code":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","rule":"git-log","signal":0,"stderr":"","stderr_truncated":false,"stdout":"3f2a1bc descriptor: refuse merge keys\n","stdout_truncated":false,"version":1}` + "\n", true},
	{"killed by a signal, binary output", `{"duration_ms":1200,"exit_code":-1,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","signal":9,"stderr":"","stderr_truncated":false,"stdout_base64":"iVBORw==","stdout_truncated":true,"version":1}` + "\n", true},
	{"refused, audited", `{"audit_id":"A000000000413","code":"policy-deny","duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"no rule allows this command","outcome":"refused","version":1}` + "\n", true},
	{"refused by the bridge, not audited", `{"code":"bad-request","duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"the request file is a symbolic link","outcome":"refused","version":1}` + "\n", true},
	{"refusal with an exit code", `{"code":"internal","duration_ms":0,"exit_code":1,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"m","outcome":"refused","version":1}` + "\n", false},
	{"exit with a code", `{"code":"internal","duration_ms":0,"exit_code":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","signal":0,"stderr":"","stderr_truncated":false,"stdout":"","stdout_truncated":false,"version":1}` + "\n", false},
	{"exit without exit_code", `{"duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","version":1}` + "\n", false},
	{"stdout twice", `{"duration_ms":0,"exit_code":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"exit","stdout":"","stdout_base64":"","version":1}` + "\n", false},
	{"unknown member", `{"code":"internal","duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"m","outcome":"refused","retry_after":1,"version":1}` + "\n", false},
	{"code in upper case", `{"code":"Internal","duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","message":"m","outcome":"refused","version":1}` + "\n", false},
	{"outcome unknown", `{"duration_ms":0,"id":"5b0c5a4e-3f8d-4c2a-9e71-0d6f3b2a1c84","outcome":"ok","version":1}` + "\n", false},
}

// jcsSpecs are JSON texts and their RFC 8785 canonical form.
var jcsSpecs = []string{
	`{"b":2,"a":1,"c":{"z":[3,{"y":true,"x":false}],"é":"\u00e9"}}`,
	// RFC 8785 §3.2.3: members sorted by UTF-16 code units.
	`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
	`{"s":"\u0000\u0008\u0009\u000a\u000b\u000c\u000d\u001f\u0020\"\\\/\u007f\u2028"}`,
	`[-0, 1, -9007199254740991, 9007199254740991, "", [], {}]`,
}
