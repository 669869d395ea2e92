package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// schemaTSCases is the golden table of schema → TypeScript expression.
var schemaTSCases = []struct {
	name   string
	schema string
	want   string
}{
	{"empty input", ``, `unknown`},
	{"null", `null`, `unknown`},
	{"true", `true`, `unknown`},
	{"empty object", `{}`, `unknown`},
	{"false", `false`, `never`},
	{"string with format", `{"type":"string","format":"email"}`, `string`},
	{"integer", `{"type":"integer","minimum":0}`, `number`},
	{"number and integer collapse", `{"type":["number","integer"]}`, `number`},
	{"boolean", `{"type":"boolean"}`, `boolean`},
	{"null type", `{"type":"null"}`, `null`},
	{"nullable via type array", `{"type":["string","null"]}`, `string | null`},
	{"nullable keyword is ignored", `{"type":"string","nullable":true}`, `string`},
	{"enum", `{"enum":["a","b",1,-2,true,null]}`, `"a" | "b" | 1 | -2 | true | null`},
	{"enum with quotes and separators", `{"enum":["it's","quo\"te","</script>","\u2028"]}`, `"it's" | "quo\"te" | "</script>" | "\u2028"`},
	{"const string", `{"const":"fixed"}`, `"fixed"`},
	{"const object and array", `{"const":{"k":[1,"x"],"a-b":{}}}`, `{ k: [1, "x"]; "a-b": { [key: string]: never } }`},
	{"anyOf", `{"anyOf":[{"type":"string"},{"type":"number"},{"type":"string"}]}`, `string | number`},
	{"oneOf", `{"oneOf":[{"const":"a"},{"const":"b"}]}`, `"a" | "b"`},
	{"anyOf with an unconstrained branch", `{"anyOf":[{"type":"string"},{}]}`, `unknown`},
	{"allOf", `{"allOf":[{"type":"string"},{"minLength":1}]}`, `string`},
	{"allOf with a union member", `{"allOf":[{"anyOf":[{"type":"string"},{"type":"number"}]},{"type":"string"}]}`, `(string | number) & string`},
	{"allOf with false", `{"allOf":[{"type":"string"},false]}`, `never`},
	{"array", `{"type":"array","items":{"type":"string"}}`, `string[]`},
	{"array of unions", `{"type":"array","items":{"type":["string","number"]}}`, `(string | number)[]`},
	{"array of negative literals", `{"type":"array","items":{"enum":[-1,2]}}`, `(-1 | 2)[]`},
	{"array without items", `{"type":"array"}`, `unknown[]`},
	{"array with items false", `{"type":"array","items":false}`, `[]`},
	{"nested arrays", `{"items":{"items":{"type":"boolean"}}}`, `boolean[][]`},
	{"tuple, all optional", `{"prefixItems":[{"type":"string"},{"type":"number"}]}`, `[string?, number?]`},
	{"tuple with minItems and rest", `{"prefixItems":[{"type":"string"},{"enum":[1,"x"]}],"items":{"type":"boolean"},"minItems":1}`, `[string, (1 | "x")?, ...boolean[]]`},
	{"tuple closed", `{"prefixItems":[{"type":"string"},{"type":"number"}],"items":false,"minItems":2}`, `[string, number]`},
	{"draft-07 tuple", `{"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":false,"minItems":2,"maxItems":2}`, `[string, number]`},
	{"draft-07 tuple with additionalItems", `{"items":[{"type":"string"}],"additionalItems":{"type":"number"},"minItems":1}`, `[string, ...number[]]`},
	{"open object", `{"type":"object"}`, `{ [key: string]: unknown }`},
	{"closed empty object", `{"type":"object","additionalProperties":false}`, `{ [key: string]: never }`},
	{"object with required and optional properties", `{"type":"object","properties":{"email":{"type":"string","description":"Where to send it."},"b-c":{"type":["integer","null"]},"$id":{"type":"string"}},"required":["email"]}`, `{
  /** Where to send it. */
  email: string;
  "b-c"?: number | null;
  $id?: string;
  [key: string]: unknown;
}`},
	{"object inferred from properties, closed, nested", `{"properties":{"n":{"type":"object","properties":{"x":{"type":"array","items":{"type":"object","properties":{"y":{"type":"string"}},"additionalProperties":false}}},"additionalProperties":false}},"additionalProperties":false}`, `{
  n?: {
    x?: {
      y?: string;
    }[];
  };
}`},
	{"required property not declared", `{"type":"object","required":["id"]}`, `{
  id: unknown;
  [key: string]: unknown;
}`},
	{"required property not declared, closed", `{"type":"object","required":["id"],"additionalProperties":false}`, `{
  id: never;
}`},
	{"additionalProperties schema alone", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{ [key: string]: number }`},
	{"additionalProperties matching required properties", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"string"}}`, `{
  a: string;
  [key: string]: string;
}`},
	{"additionalProperties with optional property", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`, `{
  a?: string;
  [key: string]: string | undefined;
}`},
	{"additionalProperties widened to unknown", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"number"}}`, `{
  a: string;
  [key: string]: unknown;
}`},
	{"patternProperties, closed", `{"type":"object","patternProperties":{"^x":{"type":"integer"},"^y":{"type":"string"}},"additionalProperties":false}`, `{ [key: string]: number | string }`},
	{"discriminated union", `{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"}},"required":["kind"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"n":{"type":"integer"}},"required":["kind","n"],"additionalProperties":false}]}`, `{
  kind: "a";
} | {
  kind: "b";
  n: number;
}`},
	{"intersection of objects", `{"allOf":[{"properties":{"a":{"type":"string"}},"additionalProperties":false},{"properties":{"b":{"type":"string"}},"required":["b"],"additionalProperties":false}]}`, `{
  a?: string;
} & {
  b: string;
}`},
	{"multi-line description with a comment end", `{"properties":{"p":{"type":"string","description":"First line.\nSecond */ line."}},"additionalProperties":false}`, `{
  /**
   * First line.
   * Second *\/ line.
   */
  p?: string;
}`},
	{"ref inlined", `{"$defs":{"id":{"type":"string","format":"uuid"}},"type":"object","properties":{"id":{"$ref":"#/$defs/id"}},"required":["id"],"additionalProperties":false}`, `{
  id: string;
}`},
	{"ref with siblings", `{"$defs":{"base":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}},"$ref":"#/$defs/base","properties":{"b":{"type":"number"}},"additionalProperties":false}`, `{
  a?: string;
} & {
  b?: number;
}`},
	{"recursive ref inlined once", `{"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}},"additionalProperties":false}},"$ref":"#/$defs/node"}`, `{
  next?: unknown;
}`},
}

// TestSchemaToTS checks the golden expressions.
func TestSchemaToTS(t *testing.T) {
	for _, tt := range schemaTSCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemaToTS([]byte(tt.schema))
			if err != nil {
				t.Fatalf("schemaToTS(%s): %v", tt.schema, err)
			}
			if got != tt.want {
				t.Errorf("schemaToTS(%s) =\n%s\nwant\n%s", tt.schema, got, tt.want)
			}
		})
	}
}

// schemaTSDeclCases is the golden table of schema → declarations.
var schemaTSDeclCases = []struct {
	name   string
	alias  string
	schema string
	want   string
}{
	{"no schema", "OnboardInput", ``, "export type OnboardInput = unknown;\n"},
	{"root description", "OnboardInput", `{"description":"Input of onboard.","type":"object","properties":{"email":{"type":"string","format":"email"}},"required":["email"]}`, `/** Input of onboard. */
export type OnboardInput = {
  email: string;
  [key: string]: unknown;
};
`},
	{"recursive defs", "Tree", `{"$defs":{"node":{"description":"A node.","type":"object","properties":{"value":{"type":"number"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"],"additionalProperties":false}},"$ref":"#/$defs/node"}`, `export type Tree = Tree_node;
/** A node. */
export type Tree_node = {
  value: number;
  children?: Tree_node[];
};
`},
	{"ref to the root and to definitions", "Doc", `{"$ref":"#/definitions/x","definitions":{"x":{"type":"object","properties":{"self":{"$ref":"#"}},"additionalProperties":false}}}`, `export type Doc = Doc_x;
export type Doc_x = {
  self?: Doc;
};
`},
	{"alias names sanitized and deduplicated, unused defs skipped", "In", `{"$defs":{"a-b":{"type":"string"},"a_b":{"type":"number"},"unused":{"type":"boolean"}},"type":"object","properties":{"p":{"$ref":"#/$defs/a-b"},"q":{"$ref":"#/$defs/a_b"},"r":{"$ref":"#/properties/p"}},"additionalProperties":false}`, `export type In = {
  p?: In_a_b;
  q?: In_a_b_2;
  r?: In_properties_p;
};
export type In_a_b = string;
export type In_a_b_2 = number;
export type In_properties_p = In_a_b;
`},
	{"name made an identifier", "my-workflow.input", `{"type":"string"}`, "export type my_workflow_input = string;\n"},
	{"reserved name", "string", `{"type":"string"}`, "export type string_ = string;\n"},
	{"mutual recursion", "M", `{"$defs":{"a":{"type":"object","properties":{"b":{"$ref":"#/$defs/b"}},"additionalProperties":false},"b":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`, `export type M = M_a;
export type M_a = {
  b?: M_b;
};
export type M_b = M_a[];
`},
}

// TestSchemaToTSDecls checks the golden declarations.
func TestSchemaToTSDecls(t *testing.T) {
	for _, tt := range schemaTSDeclCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemaToTSDecls(tt.alias, []byte(tt.schema))
			if err != nil {
				t.Fatalf("schemaToTSDecls(%q, %s): %v", tt.alias, tt.schema, err)
			}
			if got != tt.want {
				t.Errorf("schemaToTSDecls(%q, %s) =\n%s\nwant\n%s", tt.alias, tt.schema, got, tt.want)
			}
		})
	}
}

// TestSchemaToTSErrors checks that invalid schemas are reported.
func TestSchemaToTSErrors(t *testing.T) {
	for _, raw := range []string{`{"type":"strin"}`, `{"$ref":"#/$defs/x"}`, `[`, `{"pattern":"("}`} {
		if got, err := schemaToTS([]byte(raw)); err == nil {
			t.Errorf("schemaToTS(%s) = %q, nil; want an error", raw, got)
		}
		if got, err := schemaToTSDecls("X", []byte(raw)); err == nil {
			t.Errorf("schemaToTSDecls(%s) = %q, nil; want an error", raw, got)
		}
	}
}

// TestSchemaToTSFanOut checks that a fanning-out $ref graph stays cheap:
// inlining stops after schemaTSMaxInlined expansions, and declarations
// emit each alias once.
func TestSchemaToTSFanOut(t *testing.T) {
	raw := []byte(schemaFanOutSchema(40, "anyOf"))
	if got, err := schemaToTS(raw); err != nil || got != "unknown" {
		t.Errorf("schemaToTS(fan-out) = %q, %v; want %q", got, err, "unknown")
	}
	got, err := schemaToTSDecls("F", raw)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(got, "export type "); n != 42 {
		t.Errorf("schemaToTSDecls(fan-out) has %d declarations; want 42", n)
	}
	if !strings.Contains(got, "export type F_d0 = F_d1;\n") || !strings.Contains(got, "export type F_d40 = string;\n") {
		t.Errorf("schemaToTSDecls(fan-out) =\n%s", got)
	}
}

// TestSchemaTSCompilesWithTSC type-checks every golden output with
// `tsc --strict --noEmit`, when a tsc is on PATH (skipped otherwise).
func TestSchemaTSCompilesWithTSC(t *testing.T) {
	tsc, err := exec.LookPath("tsc")
	if err != nil {
		t.Skip("tsc not on PATH")
	}
	var b strings.Builder
	for i, tt := range schemaTSCases {
		fmt.Fprintf(&b, "export type Expr%d = %s;\n", i, tt.want)
	}
	for _, tt := range schemaTSDeclCases {
		b.WriteString("export namespace " + schemaTSSanitize(strings.ReplaceAll(tt.name, " ", "_")) + " {\n" + tt.want + "}\n")
	}
	file := filepath.Join(t.TempDir(), "types.ts")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tsc, "--strict", "--noEmit", file).CombinedOutput(); err != nil {
		t.Errorf("tsc --strict %s: %v\n%s\n%s", file, err, out, b.String())
	}
}
