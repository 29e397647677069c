// Package descriptor parses, canonicalises, signs and verifies the request,
// response and teardown files of coily's filesystem protocol
// (docs/protocol.md).
//
// A descriptor is a YAML 1.2 document (JSON is accepted, since it is YAML)
// whose JSON form is a single object. Requests and teardowns are signed:
// their "hmac" member is HMAC-SHA256, in lower-case hex, keyed by the
// sandbox's 32-byte key, over the RFC 8785 (JCS) canonical JSON of the object
// without its "hmac" member. The signature covers the object as written, so
// the same request in JSON, block or flow YAML, with members in any order or
// strings quoted any way, has the same canonical bytes and signature.
//
// Files come from untrusted sandboxes, so reading is strict and bounded. A
// file is at most MaxSize bytes of UTF-8 with no NUL and no byte-order mark.
// A file whose first non-blank character is '{' is read as JSON by a strict
// RFC 8259 reader (the YAML library refuses some valid JSON); anything else,
// or anything that is not JSON, is read as exactly one YAML document, and
// only what maps onto JSON is allowed: no anchors, aliases, merge keys or
// tags, no floats or nulls, no duplicate or non-string member names, at most
// MaxDepth levels and MaxNodes values, member names of at most MaxKeyLen
// characters. Plain YAML scalars follow YAML 1.2's
// core schema (true/True/TRUE are booleans, yes/on are strings, a plain
// timestamp is a string, an unquoted 123 is an integer). Integers must be
// plain decimal within ±(2^53-1). Every field then has its own rule; unknown
// members are refused. Refusals are *Error values with a Code
// (CodeBadRequest, or CodeHMACFail for a missing or malformed signature)
// whose messages name the field and its line:column but never show a value.
//
// Reading a request is ParseRequest, which returns the canonical bytes to
// check with Verify; writing one is MarshalRequest, which signs. Files are
// written as their canonical JSON followed by a newline.
//
// Cost: JSON input is read in time and memory linear in its size, with a
// small constant, its limits applied as it goes. YAML input is bounded on
// its raw bytes first (package yamlguard: size, depth, values, key length),
// so the YAML library, which builds its whole node tree before the limits
// can be applied, never sees more than about twice MaxNodes values; a
// hostile file costs a linear scan to refuse. The reader that locates YAML
// syntax errors (package yamlpos) bounds its own input too.
package descriptor
