package main

import (
	"strings"
	"testing"
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
