package main

import (
	"strings"
	"testing"
)

// nestedJSON returns a value nested depth levels deep: [[…[1]…]].
func nestedJSON(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

func TestJSONLimits(t *testing.T) {
	tests := []struct {
		name string
		lim  jsonLimits
		in   string
		ok   bool
	}{
		{"object", edgeJSON, `{"a":[1,2,{"b":null}],"c":"é😀"}`, true},
		{"depth at the limit", edgeJSON, nestedJSON(jsonMaxDepth), true},
		{"one level too deep", edgeJSON, nestedJSON(jsonMaxDepth + 1), false},
		{"ten thousand deep", edgeJSON, nestedJSON(10000), false},
		{"brackets inside strings do not count", edgeJSON, `{"s":"` + strings.Repeat("[", 500) + `"}`, true},
		{"invalid UTF-8", edgeJSON, "{\"n\":\"\xff\xfe\"}", false},
		{"overflowing number", edgeJSON, `{"name":1e999999}`, false},
		{"overflowing negative number", edgeJSON, `[-1e400]`, false},
		{"largest float", edgeJSON, `[1.7976931348623157e308,-1.7976931348623157e308]`, true},
		{"underflow is zero", edgeJSON, `[1e-999]`, true},
		{"huge integer is a finite float", edgeJSON, `[123456789012345678901234567890]`, true},
		{"NUL escape at the edge", edgeJSON, `{"s":"a\u0000b"}`, false},
		{"escaped backslash then u0000 is text", edgeJSON, `{"s":"\\u0000"}`, true},
		{"NUL escape from code", codeJSON, `{"s":"a\u0000b"}`, true},
		{"lone surrogate escape", edgeJSON, `"\ud800"`, true},
		{"empty", edgeJSON, ``, false},
		{"trailing garbage", edgeJSON, `{} x`, false},
		{"unterminated", edgeJSON, `{"a":`, false},
		{"too large for code", jsonLimits{maxDepth: 8, maxBytes: 4}, `"abcd"`, false},
		{"journal depth allows the envelope", journalJSON, `{"in":` + nestedJSON(jsonMaxDepth) + `}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.lim.check([]byte(tt.in))
			if (err == nil) != tt.ok {
				t.Fatalf("check(%.60q) = %v; want ok %v", tt.in, err, tt.ok)
			}
		})
	}
}
