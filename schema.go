package main

// schema.go: a hand-written JSON Schema validator for the subset of draft
// 2020-12 that workflow inputs and agent tool-call arguments use.
//
// Supported keywords: type, enum, const, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, multipleOf, minLength, maxLength, pattern, format (email,
// uri, date-time, date, uuid are asserted; other formats are annotations),
// items, prefixItems, minItems, maxItems, uniqueItems, properties,
// patternProperties, additionalProperties, required, minProperties,
// maxProperties, allOf, anyOf, oneOf, not, $ref (local JSON pointers such as
// #/$defs/name or #/definitions/name), $defs, definitions and the boolean
// schemas true and false. For draft-07 schemas (zod-to-json-schema and
// friends) an array-valued items is read as prefixItems, with additionalItems
// for the rest. Every other keyword is ignored, "nullable" included.
//
// Numbers are compared exactly: instances keep json.Number text and both
// sides become decimals (big coefficient, exponent), so large integers,
// decimals such as 0.0075 multipleOf 0.0001, and 1e308 stay correct.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// schemaViolation is one failed assertion: Path is the RFC 6901 JSON pointer
// of the failing instance location ("" is the whole instance) and Message a
// short plain sentence.
type schemaViolation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// schemaMaxViolations bounds how many violations one validate call reports,
// so a large invalid input gets a readable answer in bounded time.
const schemaMaxViolations = 100

// schemaMaxEvaluations bounds the subschema evaluations of one validate
// call. Ordinary schemas stay far below it; a $ref graph that fans out
// (allOf: [$ref b, $ref b], b likewise, ...) would otherwise take time
// exponential in its depth. Exhausting it is reported as a violation.
const schemaMaxEvaluations = 1 << 24

// schemaMaxDepth bounds the nesting of a schema document, matching the limit
// encoding/json applies to instances, so recursion stays shallow.
const schemaMaxDepth = 10000

// schemaMaxExponent clamps decimal exponents far beyond anything meaningful
// (1e1099511627776), so exponent arithmetic never overflows int64.
const schemaMaxExponent = 1 << 40

// jsonSchema is a compiled schema node; build one with compileSchema (the
// zero value is not meaningful: absent counts are -1). A compiled schema is
// never modified, so it is safe for concurrent use.
type jsonSchema struct {
	ptr   string // JSON pointer of this schema inside its document
	never bool   // the schema false: no instance is valid

	ref   *jsonSchema
	types schemaTypeSet

	hasEnum   bool
	enum      map[string]bool // canonical keys of the allowed values
	enumText  string
	hasConst  bool
	constKey  string
	constText string

	minimum, maximum                   *schemaDecimal
	exclusiveMinimum, exclusiveMaximum *schemaDecimal
	multipleOf                         *schemaDecimal

	minLength, maxLength int // -1 when absent
	pattern              *regexp.Regexp
	format               string

	prefixItems        []*jsonSchema
	items              *jsonSchema
	minItems, maxItems int // -1 when absent
	uniqueItems        bool

	properties           map[string]*jsonSchema
	patternProperties    []schemaPatternProperty
	additionalProperties *jsonSchema
	required             []string
	minProperties        int // -1 when absent
	maxProperties        int // -1 when absent

	allOf, anyOf, oneOf []*jsonSchema
	not                 *jsonSchema
}

// schemaPatternProperty is one patternProperties entry.
type schemaPatternProperty struct {
	re     *regexp.Regexp
	schema *jsonSchema
}

// schemaTypeSet is a set of JSON Schema type names, one bit each. An
// instance's kind is a single bit among null..string (never integer).
type schemaTypeSet uint8

// The type bits of schemaTypeSet, in the order messages list them.
const (
	schemaTypeNull schemaTypeSet = 1 << iota
	schemaTypeBoolean
	schemaTypeObject
	schemaTypeArray
	schemaTypeNumber
	schemaTypeString
	schemaTypeInteger
)

// schemaTypeByName returns the bit for a JSON Schema type name.
func schemaTypeByName(name string) (schemaTypeSet, bool) {
	switch name {
	case "null":
		return schemaTypeNull, true
	case "boolean":
		return schemaTypeBoolean, true
	case "object":
		return schemaTypeObject, true
	case "array":
		return schemaTypeArray, true
	case "number":
		return schemaTypeNumber, true
	case "string":
		return schemaTypeString, true
	case "integer":
		return schemaTypeInteger, true
	}
	return 0, false
}

// names lists the type names in t, in bit order.
func (t schemaTypeSet) names() []string {
	var out []string
	for _, name := range []string{"null", "boolean", "object", "array", "number", "string", "integer"} {
		if bit, _ := schemaTypeByName(name); t&bit != 0 {
			out = append(out, name)
		}
	}
	return out
}

// String joins the names in t with " or ".
func (t schemaTypeSet) String() string { return strings.Join(t.names(), " or ") }

// allows reports whether an instance of the given kind (and, for numbers,
// value) belongs to t; "integer" accepts any number with no fractional part.
func (t schemaTypeSet) allows(kind schemaTypeSet, num *schemaDecimal) bool {
	if t&kind != 0 {
		return true
	}
	return kind == schemaTypeNumber && t&schemaTypeInteger != 0 && num.isInteger()
}

// compileSchema parses and checks a schema document. Empty input and the
// JSON null compile to the schema that accepts everything (a workflow that
// declares no schema). A keyword of the wrong type, a bad regular expression,
// an unresolvable $ref or a $ref cycle that never descends into the instance
// is an error naming the keyword's location ("#/properties/a/type").
func compileSchema(raw []byte) (*jsonSchema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return newSchemaNode(""), nil
	}
	doc, err := schemaDecodeOrdered(raw)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	if doc == nil {
		return newSchemaNode(""), nil
	}
	c := &schemaCompiler{doc: doc, byPtr: map[string]*jsonSchema{}}
	root, err := c.compile(doc, "", 0)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	if err := c.checkCycles(); err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	return root, nil
}

// newSchemaNode returns a schema at ptr with no keywords: it accepts everything.
func newSchemaNode(ptr string) *jsonSchema {
	return &jsonSchema{ptr: ptr, minLength: -1, maxLength: -1, minItems: -1, maxItems: -1, minProperties: -1, maxProperties: -1}
}

// schemaCompiler compiles one schema document. Subschemas are memoized by
// JSON pointer, so a $ref cycle links back to an existing node instead of
// compiling forever.
type schemaCompiler struct {
	doc   any
	byPtr map[string]*jsonSchema
}

// schemaErrorAt returns a compile error for the keyword at ptr.
func schemaErrorAt(ptr, format string, args ...any) error {
	return fmt.Errorf("keyword %q: %s", "#"+ptr, fmt.Sprintf(format, args...))
}

// compile compiles the schema node found at ptr.
func (c *schemaCompiler) compile(node any, ptr string, depth int) (*jsonSchema, error) {
	if s, ok := c.byPtr[ptr]; ok {
		return s, nil
	}
	if depth > schemaMaxDepth {
		return nil, schemaErrorAt(ptr, "schema nested too deeply")
	}
	s := newSchemaNode(ptr)
	c.byPtr[ptr] = s
	switch n := node.(type) {
	case bool:
		s.never = !n
		return s, nil
	case *schemaObject:
		return s, c.compileKeywords(s, n, depth)
	}
	return nil, schemaErrorAt(ptr, "a schema must be an object or a boolean")
}

// compileKeywords fills s from the keywords of obj.
func (c *schemaCompiler) compileKeywords(s *jsonSchema, obj *schemaObject, depth int) error {
	var itemsArray []any // draft-07 items: [...]
	var additionalItems any
	for _, key := range obj.keys {
		v := obj.values[key]
		kp := s.ptr + "/" + schemaEscapeToken(key)
		var err error
		switch key {
		case "$ref":
			s.ref, err = c.resolveRef(v, kp, depth)
		case "$defs", "definitions":
			_, _, err = c.compileMap(v, kp, depth)
		case "type":
			s.types, err = schemaCompileType(v, kp)
		case "enum":
			err = s.compileEnum(v, kp)
		case "const":
			s.hasConst, s.constKey, s.constText = true, schemaCanonical(v), schemaShortJSON(v)
		case "minimum":
			s.minimum, err = schemaNumberArg(v, kp)
		case "maximum":
			s.maximum, err = schemaNumberArg(v, kp)
		case "exclusiveMinimum":
			s.exclusiveMinimum, err = schemaNumberArg(v, kp)
		case "exclusiveMaximum":
			s.exclusiveMaximum, err = schemaNumberArg(v, kp)
		case "multipleOf":
			s.multipleOf, err = schemaNumberArg(v, kp)
			if err == nil && s.multipleOf.sign <= 0 {
				err = schemaErrorAt(kp, "must be greater than 0")
			}
		case "minLength":
			s.minLength, err = schemaCountArg(v, kp)
		case "maxLength":
			s.maxLength, err = schemaCountArg(v, kp)
		case "minItems":
			s.minItems, err = schemaCountArg(v, kp)
		case "maxItems":
			s.maxItems, err = schemaCountArg(v, kp)
		case "minProperties":
			s.minProperties, err = schemaCountArg(v, kp)
		case "maxProperties":
			s.maxProperties, err = schemaCountArg(v, kp)
		case "pattern":
			s.pattern, err = schemaRegexpArg(v, kp)
		case "format":
			f, ok := v.(string)
			if !ok {
				err = schemaErrorAt(kp, "must be a string")
			}
			s.format = f
		case "uniqueItems":
			b, ok := v.(bool)
			if !ok {
				err = schemaErrorAt(kp, "must be a boolean")
			}
			s.uniqueItems = b
		case "required":
			s.required, err = schemaStringsArg(v, kp)
		case "properties":
			s.properties, _, err = c.compileMap(v, kp, depth)
		case "patternProperties":
			s.patternProperties, err = c.compilePatternProperties(v, kp, depth)
		case "additionalProperties":
			s.additionalProperties, err = c.compile(v, kp, depth+1)
		case "prefixItems":
			s.prefixItems, err = c.compileList(v, kp, depth)
		case "items":
			if arr, ok := v.([]any); ok {
				itemsArray = arr
				s.prefixItems, err = c.compileList(v, kp, depth)
			} else {
				s.items, err = c.compile(v, kp, depth+1)
			}
		case "additionalItems":
			additionalItems = v
		case "allOf":
			s.allOf, err = c.compileList(v, kp, depth)
		case "anyOf":
			s.anyOf, err = c.compileList(v, kp, depth)
		case "oneOf":
			s.oneOf, err = c.compileList(v, kp, depth)
		case "not":
			s.not, err = c.compile(v, kp, depth+1)
		}
		if err != nil {
			return err
		}
	}
	if itemsArray != nil {
		if _, ok := obj.values["prefixItems"]; ok {
			return schemaErrorAt(s.ptr+"/items", "an array of items cannot be combined with prefixItems")
		}
		if additionalItems != nil {
			var err error
			if s.items, err = c.compile(additionalItems, s.ptr+"/additionalItems", depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// compileList compiles a non-empty array of schemas.
func (c *schemaCompiler) compileList(v any, ptr string, depth int) ([]*jsonSchema, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, schemaErrorAt(ptr, "must be a non-empty array of schemas")
	}
	out := make([]*jsonSchema, len(arr))
	for i, sub := range arr {
		var err error
		if out[i], err = c.compile(sub, ptr+"/"+strconv.Itoa(i), depth+1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// compileMap compiles an object whose values are schemas; it also returns
// the keys in document order.
func (c *schemaCompiler) compileMap(v any, ptr string, depth int) (map[string]*jsonSchema, []string, error) {
	obj, ok := v.(*schemaObject)
	if !ok {
		return nil, nil, schemaErrorAt(ptr, "must be an object of schemas")
	}
	out := make(map[string]*jsonSchema, len(obj.keys))
	for _, k := range obj.keys {
		sub, err := c.compile(obj.values[k], ptr+"/"+schemaEscapeToken(k), depth+1)
		if err != nil {
			return nil, nil, err
		}
		out[k] = sub
	}
	return out, obj.keys, nil
}

// compilePatternProperties compiles patternProperties: regexp keys, schema values.
func (c *schemaCompiler) compilePatternProperties(v any, ptr string, depth int) ([]schemaPatternProperty, error) {
	subs, keys, err := c.compileMap(v, ptr, depth)
	if err != nil {
		return nil, err
	}
	out := make([]schemaPatternProperty, 0, len(keys))
	for _, k := range keys {
		re, err := schemaRegexpArg(k, ptr+"/"+schemaEscapeToken(k))
		if err != nil {
			return nil, err
		}
		out = append(out, schemaPatternProperty{re: re, schema: subs[k]})
	}
	return out, nil
}

// resolveRef resolves a local $ref ("#", "#/$defs/a", any JSON pointer into
// the document, percent-encoded as a URI fragment) to its compiled schema.
func (c *schemaCompiler) resolveRef(v any, ptr string, depth int) (*jsonSchema, error) {
	ref, ok := v.(string)
	if !ok {
		return nil, schemaErrorAt(ptr, "must be a string")
	}
	tokens, err := schemaRefTokens(ref)
	if err != nil {
		return nil, schemaErrorAt(ptr, "%v", err)
	}
	node, target, err := schemaLookup(c.doc, tokens)
	if err != nil {
		return nil, schemaErrorAt(ptr, "unresolvable $ref %q: %v", ref, err)
	}
	return c.compile(node, target, depth+1)
}

// schemaRefTokens splits a local $ref into unescaped JSON pointer tokens.
// Only same-document references are supported: no $id, no anchors, no URLs.
func schemaRefTokens(ref string) ([]string, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("unsupported $ref %q: only local references (#/...) are supported", ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, fmt.Errorf("bad $ref %q: %w", ref, err)
	}
	if frag == "" {
		return nil, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("unsupported $ref %q: anchors are not supported", ref)
	}
	tokens := strings.Split(frag[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// schemaLookup follows pointer tokens through a decoded document and returns
// the node and its canonical JSON pointer.
func schemaLookup(doc any, tokens []string) (any, string, error) {
	node, ptr := doc, ""
	for _, t := range tokens {
		switch n := node.(type) {
		case *schemaObject:
			v, ok := n.values[t]
			if !ok {
				return nil, "", fmt.Errorf("no member %q at %q", t, "#"+ptr)
			}
			node, ptr = v, ptr+"/"+schemaEscapeToken(t)
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n) {
				return nil, "", fmt.Errorf("no element %q at %q", t, "#"+ptr)
			}
			node, ptr = n[i], ptr+"/"+strconv.Itoa(i)
		default:
			return nil, "", fmt.Errorf("cannot descend into a scalar at %q", "#"+ptr)
		}
	}
	return node, ptr, nil
}

// schemaEscapeToken escapes one JSON pointer token (RFC 6901: ~ then /).
func schemaEscapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// checkCycles rejects a schema that can reach itself through $ref, allOf,
// anyOf, oneOf or not without descending into the instance: validating it
// would never terminate.
func (c *schemaCompiler) checkCycles() error {
	const (
		unvisited = iota
		active
		done
	)
	state := map[*jsonSchema]int{}
	var visit func(s *jsonSchema) error
	visit = func(s *jsonSchema) error {
		switch state[s] {
		case active:
			return schemaErrorAt(s.ptr, "schema refers to itself without descending into a property or item")
		case done:
			return nil
		}
		state[s] = active
		for _, next := range s.inPlace() {
			if err := visit(next); err != nil {
				return err
			}
		}
		state[s] = done
		return nil
	}
	ptrs := make([]string, 0, len(c.byPtr))
	for p := range c.byPtr {
		ptrs = append(ptrs, p)
	}
	slices.Sort(ptrs)
	for _, p := range ptrs {
		if err := visit(c.byPtr[p]); err != nil {
			return err
		}
	}
	return nil
}

// inPlace lists the subschemas applied to the same instance location.
func (s *jsonSchema) inPlace() []*jsonSchema {
	var out []*jsonSchema
	if s.ref != nil {
		out = append(out, s.ref)
	}
	out = append(out, s.allOf...)
	out = append(out, s.anyOf...)
	out = append(out, s.oneOf...)
	if s.not != nil {
		out = append(out, s.not)
	}
	return out
}

// schemaCompileType reads "type": a name or a non-empty array of unique names.
func schemaCompileType(v any, ptr string) (schemaTypeSet, error) {
	names, ok := v.([]any)
	if !ok {
		names = []any{v}
	}
	var set schemaTypeSet
	for _, n := range names {
		name, _ := n.(string)
		bit, ok := schemaTypeByName(name)
		if !ok {
			return 0, schemaErrorAt(ptr, "must be a type name or an array of type names (null, boolean, object, array, number, string, integer)")
		}
		if set&bit != 0 {
			return 0, schemaErrorAt(ptr, "type %q is listed twice", name)
		}
		set |= bit
	}
	if set == 0 {
		return 0, schemaErrorAt(ptr, "must not be empty")
	}
	return set, nil
}

// compileEnum reads "enum": an array of allowed values.
func (s *jsonSchema) compileEnum(v any, ptr string) error {
	arr, ok := v.([]any)
	if !ok {
		return schemaErrorAt(ptr, "must be an array")
	}
	s.hasEnum, s.enum, s.enumText = true, make(map[string]bool, len(arr)), schemaShortJSON(v)
	for _, e := range arr {
		s.enum[schemaCanonical(e)] = true
	}
	return nil
}

// schemaNumberArg reads a numeric keyword value.
func schemaNumberArg(v any, ptr string) (*schemaDecimal, error) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, schemaErrorAt(ptr, "must be a number")
	}
	d, ok := parseSchemaDecimal(string(n))
	if !ok {
		return nil, schemaErrorAt(ptr, "must be a number")
	}
	return d, nil
}

// schemaCountArg reads a non-negative integer keyword (1.0 counts), clamped
// to math.MaxInt.
func schemaCountArg(v any, ptr string) (int, error) {
	d, err := schemaNumberArg(v, ptr)
	if err != nil || d.sign < 0 || !d.isInteger() {
		return 0, schemaErrorAt(ptr, "must be a non-negative integer")
	}
	if d.sign == 0 {
		return 0, nil
	}
	if d.exp+int64(d.digits) > 18 {
		return math.MaxInt, nil
	}
	n := new(big.Int).Exp(big.NewInt(10), big.NewInt(d.exp), nil)
	return int(n.Mul(n, &d.mant).Int64()), nil
}

// schemaRegexpArg compiles a pattern (Go RE2 syntax; unanchored).
func schemaRegexpArg(v any, ptr string) (*regexp.Regexp, error) {
	p, ok := v.(string)
	if !ok {
		return nil, schemaErrorAt(ptr, "must be a string")
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, schemaErrorAt(ptr, "invalid regular expression %q: %v", p, err)
	}
	return re, nil
}

// schemaStringsArg reads an array of strings ("required").
func schemaStringsArg(v any, ptr string) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, schemaErrorAt(ptr, "must be an array of strings")
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		if out[i], ok = e.(string); !ok {
			return nil, schemaErrorAt(ptr, "must be an array of strings")
		}
	}
	return out, nil
}

// schemaShortJSON renders a schema value for a message, cut to 80 bytes.
func schemaShortJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "the allowed values"
	}
	const max = 80
	if len(b) > max {
		return truncateBytes(string(b), max) + "…"
	}
	return string(b)
}

// decodeJSONValue decodes one JSON value the way the validator expects:
// numbers stay json.Number (exact), objects are map[string]any, arrays
// []any. Trailing data after the value is an error.
func decodeJSONValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode json: unexpected data after the value")
	}
	return v, nil
}

// validateJSON decodes raw with decodeJSONValue and validates it; the error
// is only for input that is not JSON.
func (s *jsonSchema) validateJSON(raw []byte) ([]schemaViolation, error) {
	v, err := decodeJSONValue(raw)
	if err != nil {
		return nil, err
	}
	return s.validate(v), nil
}

// validate checks an instance (as produced by decodeJSONValue; float64 and
// Go integers are accepted too) and returns its violations, at most
// schemaMaxViolations, in a deterministic order. nil means valid.
func (s *jsonSchema) validate(instance any) []schemaViolation {
	steps := schemaMaxEvaluations
	v := &schemaValidator{limit: schemaMaxViolations, steps: &steps}
	s.eval(v, instance, nil)
	if steps <= 0 {
		out := v.out[:min(len(v.out), schemaMaxViolations-1)]
		return append(out, schemaViolation{Path: "", Message: "schema is too complex to evaluate against this value"})
	}
	return v.out
}

// accepts reports whether inst is valid, stopping at the first violation;
// it draws on the evaluation budget of v.
func (s *jsonSchema) accepts(v *schemaValidator, inst any) bool {
	sub := &schemaValidator{limit: 1, steps: v.steps}
	s.eval(sub, inst, nil)
	return len(sub.out) == 0
}

// schemaValidator collects violations up to a limit.
type schemaValidator struct {
	out   []schemaViolation
	limit int
	steps *int // evaluations left, shared with nested validators
}

// full reports whether evaluation should stop: enough violations, or the
// evaluation budget is spent.
func (v *schemaValidator) full() bool { return len(v.out) >= v.limit || *v.steps <= 0 }

// add records a violation at path.
func (v *schemaValidator) add(path *schemaPath, msg string) {
	if !v.full() {
		v.out = append(v.out, schemaViolation{Path: path.String(), Message: msg})
	}
}

// schemaPath is an instance location as a linked list of tokens, rendered
// only when a violation is reported. nil is the root.
type schemaPath struct {
	parent *schemaPath
	token  string
}

// child returns the location of a member or element below p.
func (p *schemaPath) child(token string) *schemaPath { return &schemaPath{parent: p, token: token} }

// String renders p as an RFC 6901 JSON pointer.
func (p *schemaPath) String() string {
	var tokens []string
	for q := p; q != nil; q = q.parent {
		tokens = append(tokens, q.token)
	}
	var b strings.Builder
	for i := len(tokens) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(schemaEscapeToken(tokens[i]))
	}
	return b.String()
}

// eval applies every keyword of s to inst at path.
func (s *jsonSchema) eval(v *schemaValidator, inst any, path *schemaPath) {
	if v.full() {
		return
	}
	*v.steps--
	if s.never {
		v.add(path, "no value is allowed here")
		return
	}
	if s.ref != nil {
		s.ref.eval(v, inst, path)
	}
	kind, num, ok := schemaClassify(inst)
	if !ok {
		v.add(path, fmt.Sprintf("unsupported value of Go type %T", inst))
		return
	}
	if s.types != 0 && !s.types.allows(kind, num) {
		got := kind.String()
		if kind == schemaTypeNumber && num.isInteger() {
			got = "integer"
		}
		v.add(path, "must be "+s.types.String()+", got "+got)
	}
	if s.hasEnum || s.hasConst {
		key := schemaCanonical(inst)
		if s.hasEnum && !s.enum[key] {
			v.add(path, "must be one of "+s.enumText)
		}
		if s.hasConst && key != s.constKey {
			v.add(path, "must equal "+s.constText)
		}
	}
	switch kind {
	case schemaTypeNumber:
		s.evalNumber(v, num, path)
	case schemaTypeString:
		s.evalString(v, inst.(string), path)
	case schemaTypeArray:
		s.evalArray(v, inst.([]any), path)
	case schemaTypeObject:
		s.evalObject(v, inst.(map[string]any), path)
	}
	s.evalApplicators(v, inst, path)
}

// evalNumber applies the numeric keywords.
func (s *jsonSchema) evalNumber(v *schemaValidator, num *schemaDecimal, path *schemaPath) {
	if s.minimum != nil && num.cmp(s.minimum) < 0 {
		v.add(path, "must be >= "+s.minimum.text)
	}
	if s.maximum != nil && num.cmp(s.maximum) > 0 {
		v.add(path, "must be <= "+s.maximum.text)
	}
	if s.exclusiveMinimum != nil && num.cmp(s.exclusiveMinimum) <= 0 {
		v.add(path, "must be > "+s.exclusiveMinimum.text)
	}
	if s.exclusiveMaximum != nil && num.cmp(s.exclusiveMaximum) >= 0 {
		v.add(path, "must be < "+s.exclusiveMaximum.text)
	}
	if s.multipleOf != nil && !num.isMultipleOf(s.multipleOf) {
		v.add(path, "must be a multiple of "+s.multipleOf.text)
	}
}

// schemaCount is n with the noun, plural unless n is 1: "1 character",
// "2 characters", "0 properties".
func schemaCount(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// evalString applies the string keywords; lengths count code points.
func (s *jsonSchema) evalString(v *schemaValidator, str string, path *schemaPath) {
	if s.minLength >= 0 || s.maxLength >= 0 {
		n := utf8.RuneCountInString(str)
		if s.minLength >= 0 && n < s.minLength {
			v.add(path, "must be at least "+schemaCount(s.minLength, "character")+" long")
		}
		if s.maxLength >= 0 && n > s.maxLength {
			v.add(path, "must be at most "+schemaCount(s.maxLength, "character")+" long")
		}
	}
	if s.pattern != nil && !s.pattern.MatchString(str) {
		v.add(path, fmt.Sprintf("must match pattern %q", s.pattern.String()))
	}
	if s.format != "" && !schemaFormatValid(s.format, str) {
		v.add(path, "must be a valid "+s.format)
	}
}

// evalArray applies the array keywords.
func (s *jsonSchema) evalArray(v *schemaValidator, arr []any, path *schemaPath) {
	if s.minItems >= 0 && len(arr) < s.minItems {
		v.add(path, "must have at least "+schemaCount(s.minItems, "item"))
	}
	if s.maxItems >= 0 && len(arr) > s.maxItems {
		v.add(path, "must have at most "+schemaCount(s.maxItems, "item"))
	}
	if s.uniqueItems {
		seen := make(map[string]int, len(arr))
		for i, item := range arr {
			key := schemaCanonical(item)
			if j, dup := seen[key]; dup {
				v.add(path, fmt.Sprintf("items %d and %d must not be equal", j, i))
				break
			}
			seen[key] = i
		}
	}
	for i, item := range arr {
		if v.full() {
			return
		}
		sub := s.items
		if i < len(s.prefixItems) {
			sub = s.prefixItems[i]
		}
		switch {
		case sub == nil:
		case sub.never:
			v.add(path.child(strconv.Itoa(i)), "item is not allowed")
		default:
			sub.eval(v, item, path.child(strconv.Itoa(i)))
		}
	}
}

// evalObject applies the object keywords; members are visited in sorted
// order so the result is deterministic.
func (s *jsonSchema) evalObject(v *schemaValidator, obj map[string]any, path *schemaPath) {
	for _, name := range s.required {
		if _, ok := obj[name]; !ok {
			v.add(path, fmt.Sprintf("missing required property %q", name))
		}
	}
	if s.minProperties >= 0 && len(obj) < s.minProperties {
		v.add(path, "must have at least "+schemaCount(s.minProperties, "property"))
	}
	if s.maxProperties >= 0 && len(obj) > s.maxProperties {
		v.add(path, "must have at most "+schemaCount(s.maxProperties, "property"))
	}
	if s.properties == nil && s.patternProperties == nil && s.additionalProperties == nil {
		return
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v.full() {
			return
		}
		child := path.child(k)
		declared := false
		if sub, ok := s.properties[k]; ok {
			declared = true
			sub.eval(v, obj[k], child)
		}
		for _, pp := range s.patternProperties {
			if pp.re.MatchString(k) {
				declared = true
				pp.schema.eval(v, obj[k], child)
			}
		}
		switch ap := s.additionalProperties; {
		case declared || ap == nil:
		case ap.never:
			v.add(child, "property is not allowed")
		default:
			ap.eval(v, obj[k], child)
		}
	}
}

// evalApplicators applies allOf, anyOf, oneOf and not.
func (s *jsonSchema) evalApplicators(v *schemaValidator, inst any, path *schemaPath) {
	for _, sub := range s.allOf {
		sub.eval(v, inst, path)
	}
	if len(s.anyOf) > 0 && !slices.ContainsFunc(s.anyOf, func(sub *jsonSchema) bool { return sub.accepts(v, inst) }) {
		v.add(path, "must match at least one schema in anyOf")
	}
	if len(s.oneOf) > 0 {
		matched := 0
		for _, sub := range s.oneOf {
			if sub.accepts(v, inst) {
				if matched++; matched > 1 {
					break
				}
			}
		}
		switch matched {
		case 0:
			v.add(path, "must match exactly one schema in oneOf, matched none")
		case 1:
		default:
			v.add(path, "must match exactly one schema in oneOf, matched more than one")
		}
	}
	if s.not != nil && s.not.accepts(v, inst) {
		v.add(path, "must not match the schema in not")
	}
}

// schemaClassify returns the kind of an instance and, for numbers, its exact
// value. ok is false for Go values that are not JSON (NaN, structs, ...).
func schemaClassify(inst any) (kind schemaTypeSet, num *schemaDecimal, ok bool) {
	switch inst.(type) {
	case nil:
		return schemaTypeNull, nil, true
	case bool:
		return schemaTypeBoolean, nil, true
	case string:
		return schemaTypeString, nil, true
	case []any:
		return schemaTypeArray, nil, true
	case map[string]any:
		return schemaTypeObject, nil, true
	}
	if num, ok := schemaNumberOf(inst); ok {
		return schemaTypeNumber, num, true
	}
	return 0, nil, false
}

// schemaNumberOf returns the exact decimal of a numeric Go value.
func schemaNumberOf(inst any) (*schemaDecimal, bool) {
	switch x := inst.(type) {
	case json.Number:
		return parseSchemaDecimal(string(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false
		}
		return parseSchemaDecimal(strconv.FormatFloat(x, 'g', -1, 64))
	case int:
		return parseSchemaDecimal(strconv.Itoa(x))
	case int64:
		return parseSchemaDecimal(strconv.FormatInt(x, 10))
	case uint64:
		return parseSchemaDecimal(strconv.FormatUint(x, 10))
	}
	return nil, false
}

// schemaCanonical encodes a JSON value so that two values are equal in the
// JSON Schema sense (numbers by value, objects regardless of member order)
// exactly when their encodings are equal. It backs const, enum and
// uniqueItems.
func schemaCanonical(v any) string {
	var b strings.Builder
	schemaWriteCanonical(&b, v)
	return b.String()
}

// schemaWriteCanonical appends the canonical encoding of v to b.
func schemaWriteCanonical(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		b.WriteString(strconv.Quote(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			schemaWriteCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		schemaWriteCanonicalObject(b, keys, func(k string) any { return x[k] })
	case *schemaObject:
		schemaWriteCanonicalObject(b, slices.Clone(x.keys), func(k string) any { return x.values[k] })
	default:
		if d, ok := schemaNumberOf(v); ok {
			b.WriteString(d.canonical())
		} else {
			fmt.Fprintf(b, "?%T", v)
		}
	}
}

// schemaWriteCanonicalObject writes an object with its keys sorted.
func schemaWriteCanonicalObject(b *strings.Builder, keys []string, get func(string) any) {
	slices.Sort(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		schemaWriteCanonical(b, get(k))
	}
	b.WriteByte('}')
}

// schemaDecimal is an exact JSON number: sign * mant * 10^exp, with mant
// free of trailing zeros so that equal values have equal fields.
type schemaDecimal struct {
	text   string  // the source text, for messages
	sign   int     // -1, 0 or +1
	mant   big.Int // absolute coefficient; zero when sign is 0
	digits int     // decimal digits in mant
	exp    int64
}

// parseSchemaDecimal parses JSON number syntax (as json.Number holds it).
func parseSchemaDecimal(s string) (*schemaDecimal, bool) {
	d := &schemaDecimal{text: s, sign: 1}
	i := 0
	if i < len(s) && s[i] == '-' {
		d.sign = -1
		i++
	}
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	var digits []byte
	start := i
	for i < len(s) && isDigit(s[i]) {
		digits = append(digits, s[i])
		i++
	}
	if i == start {
		return nil, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && isDigit(s[i]) {
			digits = append(digits, s[i])
			d.exp--
			i++
		}
		if i == start {
			return nil, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		esign := int64(1)
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			if s[i] == '-' {
				esign = -1
			}
			i++
		}
		start = i
		var e int64
		for i < len(s) && isDigit(s[i]) {
			e = min(e*10+int64(s[i]-'0'), schemaMaxExponent)
			i++
		}
		if i == start {
			return nil, false
		}
		d.exp += esign * e
	}
	if i != len(s) {
		return nil, false
	}
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		d.sign, d.exp = 0, 0
		return d, true
	}
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		d.exp++
	}
	d.mant.SetString(string(digits), 10)
	d.digits = len(digits)
	return d, true
}

// isInteger reports whether d has no fractional part.
func (d *schemaDecimal) isInteger() bool { return d.sign == 0 || d.exp >= 0 }

// cmp compares d and e: -1, 0 or +1.
func (d *schemaDecimal) cmp(e *schemaDecimal) int {
	if d.sign != e.sign {
		if d.sign < e.sign {
			return -1
		}
		return 1
	}
	if d.sign == 0 {
		return 0
	}
	// Same sign: compare magnitudes, first by the position of the leading
	// digit, then digit by digit once aligned (the shift is bounded by the
	// digit counts, so it stays small).
	mag := 0
	da, ea := d.exp+int64(d.digits), e.exp+int64(e.digits)
	switch {
	case da < ea:
		mag = -1
	case da > ea:
		mag = 1
	default:
		x, y := new(big.Int).Set(&d.mant), new(big.Int).Set(&e.mant)
		if shift := d.exp - e.exp; shift > 0 {
			x.Mul(x, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
		} else if shift < 0 {
			y.Mul(y, new(big.Int).Exp(big.NewInt(10), big.NewInt(-shift), nil))
		}
		mag = x.Cmp(y)
	}
	return mag * d.sign
}

// isMultipleOf reports whether d / m is an integer (m > 0). With
// d = a*10^p and m = b*10^q: for p >= q it is b | a*10^(p-q), computed
// modulo b; for p < q it never holds, since a has no trailing zeros.
func (d *schemaDecimal) isMultipleOf(m *schemaDecimal) bool {
	if d.sign == 0 {
		return true
	}
	k := d.exp - m.exp
	if k < 0 {
		return false
	}
	r := new(big.Int).Exp(big.NewInt(10), big.NewInt(k), &m.mant)
	r.Mul(r, &d.mant)
	return r.Mod(r, &m.mant).Sign() == 0
}

// canonical encodes the value of d (not its spelling).
func (d *schemaDecimal) canonical() string {
	if d.sign == 0 {
		return "0"
	}
	sign := ""
	if d.sign < 0 {
		sign = "-"
	}
	return sign + d.mant.String() + "e" + strconv.FormatInt(d.exp, 10)
}

// order they were written.
type schemaObject struct {
	keys   []string
	values map[string]any
}

// MarshalJSON writes the object with its members in document order.
func (o *schemaObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.values[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// schemaDecodeOrdered decodes one JSON value with objects as *schemaObject
// (a repeated key keeps its first position and last value) and numbers as
// json.Number.
func schemaDecodeOrdered(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := schemaDecodeOrderedValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode json: unexpected data after the value")
	}
	return v, nil
}

// schemaDecodeOrderedValue reads the next value from dec.
func schemaDecodeOrderedValue(dec *json.Decoder, depth int) (any, error) {
	if depth > schemaMaxDepth {
		return nil, errors.New("value nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := schemaDecodeOrderedValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	case json.Delim('{'):
		obj := &schemaObject{values: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := schemaDecodeOrderedValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := obj.values[k]; !dup {
				obj.keys = append(obj.keys, k)
			}
			obj.values[k] = v
		}
		_, err := dec.Token()
		return obj, err
	}
	return tok, nil
}

// orRoot shows the empty JSON pointer as "(root)".
func orRoot(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}
