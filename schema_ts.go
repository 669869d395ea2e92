package main

// schema_ts.go: JSON Schema → TypeScript type text, for the editor type
// files under .svc/ (workflow input and output types in workflows.d.ts).
//
// The mapping, for output that passes tsc --strict:
//   - true, {} and absent schemas are unknown; false is never.
//   - type: string, number (integer too), boolean, null, object, array; a type
//     array is a union. Without type, object keywords (properties, required,
//     additionalProperties, patternProperties) mean object and array keywords
//     (items, prefixItems) mean array.
//   - object: required properties are `name: T`, others `name?: T`, names
//     quoted unless identifiers, descriptions as /** … */ comments. An open
//     object (additionalProperties absent or true) gets `[key: string]:
//     unknown`; additionalProperties false closes it; a schema (and
//     patternProperties) becomes the index type, widened when a declared
//     property would not fit it.
//   - array: `T[]`; prefixItems is a tuple whose elements past minItems are
//     optional, with `...T[]` when items is a schema.
//   - enum is a union of literal types, const one literal type; anyOf and
//     oneOf are unions, allOf an intersection; not is ignored.
//   - $ref: schemaToTS inlines the target (a recursive reference becomes
//     unknown); schemaToTSDecls emits one alias per target, so recursion works.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Operator precedence of a TypeScript type expression, used to decide where
// parentheses are needed when expressions are combined.
const (
	schemaTSPrecUnion = iota
	schemaTSPrecIntersection
	schemaTSPrecPrimary
)

// schemaTSExpr is a TypeScript type expression and its precedence.
type schemaTSExpr struct {
	text string
	prec int
}

// schemaTSMaxInlined bounds how many $ref expansions schemaToTS performs;
// later references become unknown. A $ref graph that fans out would
// otherwise take time exponential in its depth.
const schemaTSMaxInlined = 1000

// schemaTSPrimary returns a type expression that needs no parentheses.
func schemaTSPrimary(text string) schemaTSExpr { return schemaTSExpr{text, schemaTSPrecPrimary} }

// schemaToTS returns a TypeScript type expression for the schema: "unknown"
// for nil, empty, null or true input, "never" for false. References are
// inlined; a reference back into its own expansion becomes unknown. An
// invalid schema is an error (see compileSchema).
func schemaToTS(raw []byte) (string, error) {
	g, err := newSchemaTSGen(raw, "")
	if err != nil {
		return "", err
	}
	g.inlining[""] = true
	return g.expr(g.doc, 0).text, nil
}

// schemaToTSDecls returns TypeScript declarations for the schema: `export
// type <name> = …;` and, for every $ref target it needs, an alias named
// <name>_<Def> for #/$defs/<Def> and #/definitions/<Def> (other targets are
// named after their pointer). Recursive references work through the aliases.
// name is made a valid identifier if it is not one.
func schemaToTSDecls(name string, raw []byte) (string, error) {
	base := schemaTSName(name)
	g, err := newSchemaTSGen(raw, base)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	g.order = append(g.order, schemaTSTarget{"", g.doc})
	for i := 0; i < len(g.order); i++ { // expr appends newly referenced targets
		t := g.order[i]
		text := g.expr(t.node, 0).text
		b.WriteString(schemaTSComment(schemaTSDescription(t.node), 0))
		fmt.Fprintf(&b, "export type %s = %s;\n", g.aliases[t.ptr], text)
	}
	return b.String(), nil
}

// schemaTSGen turns one schema document into TypeScript.
type schemaTSGen struct {
	named    bool              // refs become aliases instead of being inlined
	base     string            // alias name of the root
	aliases  map[string]string // ref target pointer → alias name
	taken    map[string]bool   // alias names in use
	order    []schemaTSTarget  // targets to declare, in discovery order
	doc      any               // the schema document, objects in member order
	inlining map[string]bool   // targets being inlined (recursion guard)
	inlined  int               // expansions so far, up to schemaTSMaxInlined
}

// schemaTSTarget is a schema node that gets a type alias.
type schemaTSTarget struct {
	ptr  string
	node any
}

// newSchemaTSGen checks the schema with compileSchema and prepares a
// generator; base "" selects inline mode.
func newSchemaTSGen(raw []byte, base string) (*schemaTSGen, error) {
	if _, err := compileSchema(raw); err != nil {
		return nil, fmt.Errorf("schema to typescript: %w", err)
	}
	var doc any
	if len(bytes.TrimSpace(raw)) > 0 {
		var err error
		if doc, err = schemaDecodeOrdered(raw); err != nil {
			return nil, fmt.Errorf("schema to typescript: %w", err)
		}
	}
	g := &schemaTSGen{
		named:    base != "",
		base:     base,
		aliases:  map[string]string{"": base},
		taken:    map[string]bool{base: true},
		doc:      doc,
		inlining: map[string]bool{},
	}
	return g, nil
}

// expr returns the type of a schema node; ind is the indentation
// level of the line the expression starts on.
func (g *schemaTSGen) expr(node any, ind int) schemaTSExpr {
	obj, ok := node.(*schemaObject)
	if !ok {
		if node == false {
			return schemaTSPrimary("never")
		}
		return schemaTSPrimary("unknown")
	}
	var parts []schemaTSExpr
	if ref, ok := obj.values["$ref"].(string); ok {
		parts = append(parts, g.refExpr(ref, ind))
	}
	if c, ok := obj.values["const"]; ok {
		parts = append(parts, schemaTSLiteral(c))
	} else if e, ok := obj.values["enum"].([]any); ok {
		lits := make([]schemaTSExpr, len(e))
		for i, v := range e {
			lits[i] = schemaTSLiteral(v)
		}
		parts = append(parts, schemaTSUnion(lits))
	} else if t, ok := g.typed(obj, ind); ok {
		parts = append(parts, t)
	}
	if subs, ok := obj.values["allOf"].([]any); ok {
		parts = append(parts, g.exprs(subs, ind)...)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if subs, ok := obj.values[k].([]any); ok {
			parts = append(parts, schemaTSUnion(g.exprs(subs, ind)))
		}
	}
	return schemaTSIntersect(parts)
}

// exprs returns the types of a list of subschemas.
func (g *schemaTSGen) exprs(subs []any, ind int) []schemaTSExpr {
	out := make([]schemaTSExpr, len(subs))
	for i, s := range subs {
		out[i] = g.expr(s, ind)
	}
	return out
}

// refExpr returns the type a $ref stands for: an alias name in declaration
// mode, the inlined target otherwise.
func (g *schemaTSGen) refExpr(ref string, ind int) schemaTSExpr {
	tokens, err := schemaRefTokens(ref)
	if err != nil {
		return schemaTSPrimary("unknown") // compileSchema has already rejected it
	}
	node, target, err := schemaLookup(g.doc, tokens)
	if err != nil {
		return schemaTSPrimary("unknown")
	}
	if !g.named {
		if g.inlining[target] || g.inlined >= schemaTSMaxInlined {
			return schemaTSPrimary("unknown")
		}
		g.inlined++
		g.inlining[target] = true
		defer delete(g.inlining, target)
		return g.expr(node, ind)
	}
	name, ok := g.aliases[target]
	if !ok {
		name = g.aliasFor(tokens)
		g.aliases[target] = name
		g.order = append(g.order, schemaTSTarget{target, node})
	}
	return schemaTSExpr{name, schemaTSPrecPrimary}
}

// aliasFor picks an unused alias name for a ref target: <base>_<Def> for
// $defs and definitions entries, <base>_<tokens…> otherwise.
func (g *schemaTSGen) aliasFor(tokens []string) string {
	if len(tokens) == 2 && (tokens[0] == "$defs" || tokens[0] == "definitions") {
		tokens = tokens[1:]
	}
	name := g.base + "_" + schemaTSSanitize(strings.Join(tokens, "_"))
	for n := 2; g.taken[name]; n++ {
		name = fmt.Sprintf("%s_%s_%d", g.base, schemaTSSanitize(strings.Join(tokens, "_")), n)
	}
	g.taken[name] = true
	return name
}

// typed returns the type given by "type" or, without it, by the object or
// array keywords present; ok is false when nothing constrains the type.
func (g *schemaTSGen) typed(obj *schemaObject, ind int) (schemaTSExpr, bool) {
	var names []string
	switch t := obj.values["type"].(type) {
	case string:
		names = []string{t}
	case []any:
		for _, n := range t {
			s, _ := n.(string)
			names = append(names, s)
		}
	default:
		if schemaTSHasAny(obj, "properties", "required", "additionalProperties", "patternProperties") {
			names = append(names, "object")
		}
		if schemaTSHasAny(obj, "items", "prefixItems") {
			names = append(names, "array")
		}
		if names == nil {
			return schemaTSExpr{}, false
		}
	}
	parts := make([]schemaTSExpr, 0, len(names))
	for _, n := range names {
		switch n {
		case "string", "boolean", "null":
			parts = append(parts, schemaTSExpr{n, schemaTSPrecPrimary})
		case "number", "integer":
			parts = append(parts, schemaTSExpr{"number", schemaTSPrecPrimary})
		case "object":
			parts = append(parts, g.object(obj, ind))
		case "array":
			parts = append(parts, g.array(obj, ind))
		}
	}
	return schemaTSUnion(parts), true
}

// schemaTSHasAny reports whether obj has any of the keywords.
func schemaTSHasAny(obj *schemaObject, keywords ...string) bool {
	for _, k := range keywords {
		if _, ok := obj.values[k]; ok {
			return true
		}
	}
	return false
}

// object returns the object type of obj, one member per line.
func (g *schemaTSGen) object(obj *schemaObject, ind int) schemaTSExpr {
	required := map[string]bool{}
	if req, ok := obj.values["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
	}
	pad := strings.Repeat("  ", ind+1)
	var b strings.Builder
	var propTypes []schemaTSExpr
	anyOptional := false
	declared := map[string]bool{}
	props, _ := obj.values["properties"].(*schemaObject)
	if props != nil {
		for _, name := range props.keys {
			sub := props.values[name]
			t := g.expr(sub, ind+1)
			b.WriteString(schemaTSComment(schemaTSDescription(sub), ind+1))
			b.WriteString(pad + schemaTSPropertyName(name))
			if !required[name] {
				b.WriteString("?")
				anyOptional = true
			}
			b.WriteString(": " + t.text + ";\n")
			propTypes = append(propTypes, t)
			declared[name] = true
		}
	}
	index, hasIndex := g.indexType(obj, ind)
	undeclaredType := schemaTSPrimary("unknown")
	if hasIndex {
		undeclaredType = index
	} else if _, closed := obj.values["additionalProperties"]; closed {
		undeclaredType = schemaTSPrimary("never")
	}
	if req, ok := obj.values["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok && !declared[s] {
				declared[s] = true
				b.WriteString(pad + schemaTSPropertyName(s) + ": " + undeclaredType.text + ";\n")
				propTypes = append(propTypes, undeclaredType)
			}
		}
	}
	if hasIndex {
		// Every declared property must be assignable to the index type.
		for _, t := range propTypes {
			if t.text != index.text {
				index = schemaTSPrimary("unknown")
				break
			}
		}
		if anyOptional && index.text != "unknown" {
			index = schemaTSUnion([]schemaTSExpr{index, {"undefined", schemaTSPrecPrimary}})
		}
	}
	switch {
	case b.Len() == 0 && !hasIndex:
		return schemaTSExpr{"{ [key: string]: never }", schemaTSPrecPrimary}
	case b.Len() == 0:
		return schemaTSExpr{"{ [key: string]: " + index.text + " }", schemaTSPrecPrimary}
	case hasIndex:
		b.WriteString(pad + "[key: string]: " + index.text + ";\n")
	}
	return schemaTSExpr{"{\n" + b.String() + strings.Repeat("  ", ind) + "}", schemaTSPrecPrimary}
}

// indexType returns the type of undeclared members: unknown when
// additionalProperties is absent or true, none when it is false (unless
// patternProperties admit some), else the union of additionalProperties and
// patternProperties types.
func (g *schemaTSGen) indexType(obj *schemaObject, ind int) (schemaTSExpr, bool) {
	var parts []schemaTSExpr
	if pp, ok := obj.values["patternProperties"].(*schemaObject); ok {
		for _, k := range pp.keys {
			parts = append(parts, g.expr(pp.values[k], ind+1))
		}
	}
	switch ap, ok := obj.values["additionalProperties"]; {
	case !ok || ap == true:
		return schemaTSPrimary("unknown"), true
	case ap == false:
		if len(parts) == 0 {
			return schemaTSExpr{}, false
		}
	default:
		parts = append(parts, g.expr(ap, ind+1))
	}
	return schemaTSUnion(parts), true
}

// array returns the array or tuple type of obj.
func (g *schemaTSGen) array(obj *schemaObject, ind int) schemaTSExpr {
	prefixKey, restKey := "prefixItems", "items"
	if _, ok := obj.values["items"].([]any); ok { // draft-07 tuple form
		prefixKey, restKey = "items", "additionalItems"
	}
	rest, hasRest := obj.values[restKey]
	prefix, _ := obj.values[prefixKey].([]any)
	if prefix == nil {
		switch {
		case !hasRest:
			return schemaTSExpr{"unknown[]", schemaTSPrecPrimary}
		case rest == false:
			return schemaTSExpr{"[]", schemaTSPrecPrimary}
		}
		return schemaTSExpr{schemaTSParen(g.expr(rest, ind), schemaTSPrecPrimary) + "[]", schemaTSPrecPrimary}
	}
	minItems := 0
	if n, ok := obj.values["minItems"]; ok {
		minItems, _ = schemaCountArg(n, "/minItems") // valid: compileSchema checked it
	}
	elems := make([]string, 0, len(prefix)+1)
	for i, t := range g.exprs(prefix, ind) {
		if i < minItems {
			elems = append(elems, t.text)
		} else {
			elems = append(elems, schemaTSParen(t, schemaTSPrecPrimary)+"?")
		}
	}
	if hasRest && rest != false {
		elems = append(elems, "..."+schemaTSParen(g.expr(rest, ind), schemaTSPrecPrimary)+"[]")
	}
	return schemaTSExpr{"[" + strings.Join(elems, ", ") + "]", schemaTSPrecPrimary}
}

// schemaTSPropertyName returns name bare if it is an ASCII identifier,
// quoted otherwise.
func schemaTSPropertyName(name string) string {
	if name != "" && schemaTSSanitize(name) == name {
		return name
	}
	return schemaTSQuote(name)
}

// schemaTSLiteral returns the literal type of a JSON value: strings, numbers,
// booleans and null as themselves, arrays as tuples, objects as object types
// whose members are literal types.
func schemaTSLiteral(v any) schemaTSExpr {
	switch x := v.(type) {
	case nil:
		return schemaTSExpr{"null", schemaTSPrecPrimary}
	case bool:
		return schemaTSExpr{strconv.FormatBool(x), schemaTSPrecPrimary}
	case string:
		return schemaTSExpr{schemaTSQuote(x), schemaTSPrecPrimary}
	case json.Number:
		if strings.HasPrefix(string(x), "-") {
			return schemaTSExpr{string(x), schemaTSPrecIntersection} // (-1)[] needs parentheses
		}
		return schemaTSExpr{string(x), schemaTSPrecPrimary}
	case []any:
		elems := make([]string, len(x))
		for i, e := range x {
			elems[i] = schemaTSLiteral(e).text
		}
		return schemaTSExpr{"[" + strings.Join(elems, ", ") + "]", schemaTSPrecPrimary}
	case *schemaObject:
		if len(x.keys) == 0 {
			return schemaTSExpr{"{ [key: string]: never }", schemaTSPrecPrimary}
		}
		members := make([]string, len(x.keys))
		for i, k := range x.keys {
			members[i] = schemaTSPropertyName(k) + ": " + schemaTSLiteral(x.values[k]).text
		}
		return schemaTSExpr{"{ " + strings.Join(members, "; ") + " }", schemaTSPrecPrimary}
	}
	return schemaTSPrimary("unknown")
}

// schemaTSUnion joins alternatives with |: unknown absorbs everything, never
// disappears, duplicates are dropped.
func schemaTSUnion(parts []schemaTSExpr) schemaTSExpr {
	var texts []string
	seen := map[string]bool{}
	var last schemaTSExpr
	for _, p := range parts {
		switch {
		case p.text == "unknown":
			return schemaTSPrimary("unknown")
		case p.text == "never" || seen[p.text]:
			continue
		}
		seen[p.text] = true
		texts = append(texts, p.text) // & binds tighter than |: no parentheses needed
		last = p
	}
	switch len(texts) {
	case 0:
		return schemaTSPrimary("never")
	case 1:
		return last
	}
	return schemaTSExpr{strings.Join(texts, " | "), schemaTSPrecUnion}
}

// schemaTSIntersect joins constraints with &: unknown disappears, never
// absorbs everything, duplicates are dropped.
func schemaTSIntersect(parts []schemaTSExpr) schemaTSExpr {
	var texts []string
	seen := map[string]bool{}
	var last schemaTSExpr
	for _, p := range parts {
		switch {
		case p.text == "never":
			return schemaTSPrimary("never")
		case p.text == "unknown" || seen[p.text]:
			continue
		}
		seen[p.text] = true
		texts = append(texts, schemaTSParen(p, schemaTSPrecIntersection))
		last = p
	}
	switch len(texts) {
	case 0:
		return schemaTSPrimary("unknown")
	case 1:
		return last
	}
	return schemaTSExpr{strings.Join(texts, " & "), schemaTSPrecIntersection}
}

// schemaTSParen returns e's text, parenthesized if it binds looser than prec.
func schemaTSParen(e schemaTSExpr, prec int) string {
	if e.prec < prec {
		return "(" + e.text + ")"
	}
	return e.text
}

// schemaTSQuote returns s as a TypeScript string literal (JSON syntax, which
// escapes U+2028 and U+2029 too).
func schemaTSQuote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// schemaTSDescription returns the description of a schema node, if any.
func schemaTSDescription(node any) string {
	if obj, ok := node.(*schemaObject); ok {
		d, _ := obj.values["description"].(string)
		return strings.TrimSpace(d)
	}
	return ""
}

// schemaTSComment renders a description as a /** … */ comment indented to
// level ind; "" renders nothing. "*/" inside is broken up so the comment
// cannot end early.
func schemaTSComment(desc string, ind int) string {
	if desc == "" {
		return ""
	}
	pad := strings.Repeat("  ", ind)
	desc = strings.ReplaceAll(strings.ReplaceAll(desc, "\r\n", "\n"), "*/", "*\\/")
	lines := strings.Split(desc, "\n")
	if len(lines) == 1 {
		return pad + "/** " + lines[0] + " */\n"
	}
	var b strings.Builder
	b.WriteString(pad + "/**\n")
	for _, l := range lines {
		b.WriteString(strings.TrimRight(pad+" * "+l, " ") + "\n")
	}
	b.WriteString(pad + " */\n")
	return b.String()
}

// schemaTSName makes name a valid type alias name: other characters become
// "_", a leading digit or a reserved word gets an extra "_".
func schemaTSName(name string) string {
	name = schemaTSSanitize(name)
	switch name {
	case "any", "unknown", "never", "string", "number", "boolean", "symbol", "object", "bigint",
		"undefined", "null", "void", "this", "true", "false", "type", "interface", "class", "enum",
		"const", "let", "var", "function", "new", "delete", "typeof", "in", "of", "keyof", "readonly",
		"infer", "is", "asserts", "extends", "implements", "import", "export", "default", "return",
		"if", "else", "for", "while", "do", "switch", "case", "break", "continue", "try", "catch",
		"finally", "throw", "with", "yield", "await", "super", "package", "private", "protected",
		"public", "static", "debugger", "instanceof":
		return name + "_"
	}
	return name
}

// schemaTSSanitize replaces characters not allowed in identifiers with "_"
// and prefixes "_" when the result would start with a digit or be empty.
func schemaTSSanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !schemaIsAlnum(c) && c != '_' && c != '$' {
			b[i] = '_'
		}
	}
	if len(b) == 0 || ('0' <= b[0] && b[0] <= '9') {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}
