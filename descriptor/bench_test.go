package descriptor

import "testing"

// A valid request's parse, as YAML and as JSON: the bound on YAML's raw
// bytes must cost next to nothing beside the reader.
func BenchmarkParseRequestYAML(b *testing.B) {
	data := []byte(yamlDoc())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := ParseRequest(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRequestJSON(b *testing.B) {
	data := []byte(baseJSON)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := ParseRequest(data); err != nil {
			b.Fatal(err)
		}
	}
}
