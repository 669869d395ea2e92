package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dop251/goja"
)

func TestMarkSteps(t *testing.T) {
	tests := []struct {
		name, in string
		steps    []string
	}{
		{"plain", "async function a(x) {\n  \"use step\";\n  return x;\n}", []string{"a"}},
		{"single quotes and defaults", "async function b(x = f(1, \")\"), { y } = {}) { 'use step'; }", []string{"b"}},
		{"not a step", "async function c() {\n  \"use workflow\";\n}\nfunction d() { return \"use step\"; }", nil},
		{"two", "function e() { \"use step\"; }\nasync function g() { \"use step\"; }", []string{"e", "g"}},
	}
	for _, tt := range tests {
		got := markSteps(tt.in)
		for _, s := range tt.steps {
			if !strings.Contains(got, "var "+s+" = __svc_step(\""+s+"\", __svc_step_"+s+");") || !strings.Contains(got, "function __svc_step_"+s+"(") {
				t.Errorf("%s: markSteps did not route %s:\n%s", tt.name, s, got)
			}
		}
		if n := strings.Count(got, "__svc_step("); n != len(tt.steps) {
			t.Errorf("%s: %d steps routed; want %d:\n%s", tt.name, n, len(tt.steps), got)
		}
	}
}

func TestCompileErrorsCarryTheSourceLine(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "workflows/util.ts", "export function boom(): number {\n  throw new Error(\"kaput\");\n}\n")
	writeFile(t, dir, "workflows/x.workflow.ts", "import { boom } from \"./util\";\nconst v = boom();\nexport default async function x() { \"use workflow\"; return v; }\n")
	m, err := bundleModule(dir, "workflows/x.workflow.ts")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = newModuleVM(m, vmOptions{Log: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), "workflows/util.ts:2:") || !strings.Contains(err.Error(), "kaput") {
		t.Fatalf("evaluation error = %v; want workflows/util.ts:2 and the message", err)
	}
}

// TestJSONParseAsJSONParse: jsonParse (jsonDecoder) makes what the VM's own
// JSON.parse makes, compared in the VM: the same JSON.stringify, the same
// key order, own "__proto__" keys, number kinds (-0, integers, exponents),
// escapes, lone surrogates and invalid UTF-8 as encoding/json decodes them;
// and malformed text throws the VM's SyntaxError.
func TestJSONParseAsJSONParse(t *testing.T) {
	vm := goja.New()
	check, err := vm.RunString(`(function (a, text) {
		const b = JSON.parse(text);
		const show = (v) => JSON.stringify(v, (k, x) => (typeof x === "number" && Object.is(x, -0) ? "-0" : x));
		const keys = (v) => (v && typeof v === "object" ? Object.keys(v).join(",") + "|" + Object.values(v).map(keys).join(";") : typeof v);
		const protoOwn = (v) => (v && typeof v === "object" ? Object.prototype.hasOwnProperty.call(v, "__proto__") + "/" + (Object.getPrototypeOf(v) === Object.prototype || Array.isArray(v)) : "");
		const sa = show(a), sb = show(b);
		if (sa !== sb) return "value " + sa + " != " + sb;
		if (keys(a) !== keys(b)) return "keys " + keys(a) + " != " + keys(b);
		if (protoOwn(a) !== protoOwn(b)) return "__proto__ " + protoOwn(a) + " != " + protoOwn(b);
		if (Array.isArray(a) !== Array.isArray(b)) return "array-ness differs";
		return "";
	})`)
	if err != nil {
		t.Fatal(err)
	}
	fn, _ := goja.AssertFunction(check)
	for _, text := range []string{
		`1`, `-0`, `0`, `1.5`, `-12.25e3`, `1E-7`, `12345678901234567890`, `true`, `false`, `null`, `"s"`, `""`,
		` {"n": 2 , "a":[1, 2,[3,{}],[]], "o":{"x":null}} `, `[]`, `{}`, `[[[]]]`,
		`{"b":1,"a":2,"b":3}`, `{"__proto__":{"x":1},"y":2}`, `{"1":"a","0":"b","k":"c"}`,
		`"tab\tnew\nline \"q\" \\ \/ \u00e9 \ud83d\ude00"`, `"lone \ud800 surrogate"`, "\"bad \xff utf-8\"", `"plain ünïcode ✓"`,
		`{"input":{"n":1},"steps":[{"seq":1,"name":"one","result":2}]}`,
	} {
		got, err := jsonParse(vm, []byte(text))
		if err != nil {
			t.Errorf("jsonParse(%s): %v", text, err)
			continue
		}
		res, err := fn(goja.Undefined(), got, vm.ToValue(text))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if res.String() != "" {
			t.Errorf("jsonParse(%s): %s", text, res)
		}
	}
	for _, text := range []string{``, ` `, `{`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `-`, `+1`, `tru`, `"open`, "\"ctl \x01\"", `{"a" 1}`, `{a:1}`, `[1 2]`, `1 2`, `"\x"`, `1e400`, strings.Repeat("[", jsonParseDepth+2) + strings.Repeat("]", jsonParseDepth+2)} {
		_, got := jsonParse(vm, []byte(text))
		_, want := vm.RunString(`JSON.parse(` + strconv.Quote(text) + `)`)
		if (got == nil) != (want == nil) || (got != nil && !strings.Contains(got.Error(), "SyntaxError")) {
			t.Errorf("jsonParse(%q) = %v; JSON.parse throws %v", text, got, want)
		}
	}
}
