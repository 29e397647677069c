package descriptor

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical form.
var rfcNumbers = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"},
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
}

func TestRFC8785Numbers(t *testing.T) {
	for _, c := range rfcNumbers {
		f := math.Float64frombits(c.bits)
		got, err := Canonicalize(f)
		if err != nil || string(got) != c.want {
			t.Errorf("%016x: got %q, %v; want %q", c.bits, got, err, c.want)
		}
		// The same through JSON text.
		got, err = CanonicalizeJSON([]byte(strconv.FormatFloat(f, 'g', -1, 64)))
		if err != nil || string(got) != c.want {
			t.Errorf("%016x as JSON text: got %q, %v; want %q", c.bits, got, err, c.want)
		}
	}
	for _, bits := range []uint64{0x7fffffffffffffff, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000} {
		if got, err := Canonicalize(math.Float64frombits(bits)); err == nil {
			t.Errorf("%016x: got %q, want an error (NaN/Infinity)", bits, got)
		}
	}
	for _, s := range []string{"1e400", "-1e400"} {
		if got, err := CanonicalizeJSON([]byte(s)); err == nil {
			t.Errorf("%s: got %q, want an error (overflows to Infinity)", s, got)
		}
	}
}

// TestES6Numbers checks formatNumber against a table made with node's
// Number.prototype.toString (testdata/gen_es6numbers.js).
func TestES6Numbers(t *testing.T) {
	f, err := os.Open("testdata/es6numbers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		hexBits, want, ok := strings.Cut(line, " ")
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if !ok || err != nil {
			t.Fatalf("bad line %q", line)
		}
		got, err := formatNumber(math.Float64frombits(bits))
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", hexBits, got, err, want)
		}
		n++
	}
	if n < 5000 {
		t.Fatalf("only %d numbers checked", n)
	}
}

// The RFC's own examples (sections 3.2.2 and 3.2.3), and the other test
// vectors of its reference implementation.
func TestRFC8785Examples(t *testing.T) {
	sortingIn := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	sortingOut := `{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`
	cases := []struct{ name, in, want string }{
		{"3.2.2 values", `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"3.2.3 sorting", sortingIn, sortingOut},
		{"3.2.3 arrays", `[56, {"d": true, "10": null, "1": [ ]}]`, `[56,{"1":[],"10":null,"d":true}]`},
		{"structures", `{
  "1": {"f": {"f": "hi","F": 5} ,"\n": 56.0},
  "10": { },
  "": "empty",
  "a": { },
  "111": [ {"e": "yes","E": "no" } ],
  "A": { }
}`, `{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"A":{},"a":{}}`},
		{"french", `{"peach": "This sorting order", "péché": "is wrong according to French", "pêche": "but canonicalization MUST", "sin": "ignore locale"}`,
			`{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}`},
		{"unicode", `{"Unnormalized Unicode":"A\u030a"}`, "{\"Unnormalized Unicode\":\"A\u030a\"}"},
		{"weird", `{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\u000a": "Newline", "1": "One", "\u0080": "Control\u007f", "\ud83d\ude02": "Smiley", "\u00f6": "Latin Small Letter O With Diaeresis", "\ufb33": "Hebrew Letter Dalet With Dagesh", "</script>": "Browser Challenge"}`,
			"{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u0080\":\"Control\u007f\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😂\":\"Smiley\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{"literals", "  true ", "true"},
		{"null", "null", "null"},
		{"string", `"\u2028\u2029/\u001f\u007f"`, "\"\u2028\u2029/\\u001f\u007f\""},
		{"control escapes", `"\b\t\n\f\r\u0000\u0001\u000b\u001F"`, `"\b\t\n\f\r\u0000\u0001\u000b\u001f"`},
		{"negative zero", `[-0, -0.0, 0e10]`, `[0,0,0]`},
	}
	for _, c := range cases {
		got, err := CanonicalizeJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s:\n got %q, %v\nwant %q", c.name, got, err, c.want)
		}
	}
}

func TestCanonicalizeJSONRefuses(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`,
		"\"\xff\"", "\xef\xbb\xbf{}", `{} {}`, `{}x`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `+1`, `0x10`, `NaN`,
		`Infinity`, `-`, `1e`, `"\x"`, `"a` + "\n" + `"`, `'a'`, `{a:1}`, `[`, `{"a"}`, `tru`, `nul`, `"\u12"`,
		strings.Repeat("[", maxCanonicalDepth+1) + strings.Repeat("]", maxCanonicalDepth+1),
	} {
		if got, err := CanonicalizeJSON([]byte(in)); err == nil {
			t.Errorf("CanonicalizeJSON(%.40q) = %q, want an error", in, got)
		}
	}
}

func TestCanonicalizeValues(t *testing.T) {
	got, err := Canonicalize(map[string]any{
		"int": int64(1) << 53, "small": -42, "f": 0.1, "n": json.Number("1E2"), "nil": nil,
		"list": []any{"a", true, false, map[string]any{}}, "s": "\"\\\x00\x1f</>",
	})
	want := `{"f":0.1,"int":9007199254740992,"list":["a",true,false,{}],"n":100,"nil":null,"s":"\"\\\u0000\u001f</>","small":-42}`
	if err != nil || string(got) != want {
		t.Errorf("got %s, %v\nwant %s", got, err, want)
	}
	for _, v := range []any{
		int64(1)<<53 + 1, int64(math.MaxInt64), math.NaN(), math.Inf(-1), json.Number("0x10"), json.Number("1_0"),
		json.Number("Inf"), json.Number(""), "\xff", map[string]any{"\xff": 1}, []string{"typed"}, uint(1), float32(1),
	} {
		if got, err := Canonicalize(v); err == nil {
			t.Errorf("Canonicalize(%#v) = %q, want an error", v, got)
		}
	}
	// Exactly representable large integers are fine.
	if got, err := Canonicalize(int64(math.MinInt64)); err != nil || string(got) != "-9223372036854776000" {
		t.Errorf("MinInt64: %q, %v", got, err)
	}
}
