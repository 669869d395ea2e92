package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// schemaSuiteCase is one fact from the JSON-Schema-Test-Suite (draft2020-12
// and its optional/format files), rewritten as a table row.
type schemaSuiteCase struct {
	name     string
	schema   string
	instance string
	valid    bool
}

// schemaSuiteCases are the suite facts for every supported keyword.
var schemaSuiteCases = []schemaSuiteCase{
	// type.json
	{"type integer: an integer", `{"type":"integer"}`, `1`, true},
	{"type integer: a float with zero fractional part", `{"type":"integer"}`, `1.0`, true},
	{"type integer: a float", `{"type":"integer"}`, `1.1`, false},
	{"type integer: a string", `{"type":"integer"}`, `"foo"`, false},
	{"type integer: a numeric string", `{"type":"integer"}`, `"1"`, false},
	{"type integer: an object", `{"type":"integer"}`, `{}`, false},
	{"type integer: an array", `{"type":"integer"}`, `[]`, false},
	{"type integer: a boolean", `{"type":"integer"}`, `true`, false},
	{"type integer: null", `{"type":"integer"}`, `null`, false},
	{"type number: an integer", `{"type":"number"}`, `1`, true},
	{"type number: a float with zero fractional part", `{"type":"number"}`, `1.0`, true},
	{"type number: a float", `{"type":"number"}`, `1.1`, true},
	{"type number: a string", `{"type":"number"}`, `"foo"`, false},
	{"type number: a numeric string", `{"type":"number"}`, `"1"`, false},
	{"type number: null", `{"type":"number"}`, `null`, false},
	{"type string: 1", `{"type":"string"}`, `1`, false},
	{"type string: a string", `{"type":"string"}`, `"foo"`, true},
	{"type string: a numeric string", `{"type":"string"}`, `"1"`, true},
	{"type string: an empty string", `{"type":"string"}`, `""`, true},
	{"type string: an object", `{"type":"string"}`, `{}`, false},
	{"type object: an object", `{"type":"object"}`, `{}`, true},
	{"type object: an array", `{"type":"object"}`, `[]`, false},
	{"type object: null", `{"type":"object"}`, `null`, false},
	{"type array: an array", `{"type":"array"}`, `[]`, true},
	{"type array: an object", `{"type":"array"}`, `{}`, false},
	{"type boolean: true", `{"type":"boolean"}`, `true`, true},
	{"type boolean: false", `{"type":"boolean"}`, `false`, true},
	{"type boolean: zero", `{"type":"boolean"}`, `0`, false},
	{"type boolean: an empty string", `{"type":"boolean"}`, `""`, false},
	{"type null: null", `{"type":"null"}`, `null`, true},
	{"type null: zero", `{"type":"null"}`, `0`, false},
	{"type null: false", `{"type":"null"}`, `false`, false},
	{"type null: an empty string", `{"type":"null"}`, `""`, false},
	{"type array of types: an integer", `{"type":["integer","string"]}`, `1`, true},
	{"type array of types: a string", `{"type":["integer","string"]}`, `"foo"`, true},
	{"type array of types: a float", `{"type":["integer","string"]}`, `1.1`, false},
	{"type array of types: an object", `{"type":["integer","string"]}`, `{}`, false},
	{"type array of types: null", `{"type":["integer","string"]}`, `null`, false},
	{"type array with one item: string", `{"type":["string"]}`, `"foo"`, true},
	{"type array with one item: number", `{"type":["string"]}`, `123`, false},
	{"type array or object: array", `{"type":["array","object"]}`, `[1,2,3]`, true},
	{"type array or object: object", `{"type":["array","object"]}`, `{"foo":123}`, true},
	{"type array or object: null", `{"type":["array","object"]}`, `null`, false},
	{"type array, object or null: null", `{"type":["array","object","null"]}`, `null`, true},
	{"type array, object or null: string", `{"type":["array","object","null"]}`, `"foo"`, false},
	// optional/bignum.json
	{"bignum: a bignum is an integer", `{"type":"integer"}`, `12345678910111213141516171819202122232425262728293031`, true},
	{"bignum: a negative bignum is an integer", `{"type":"integer"}`, `-12345678910111213141516171819202122232425262728293031`, true},
	{"bignum: a bignum with zero fraction is an integer", `{"type":"integer"}`, `12345678910111213141516171819202122232425262728293031.0`, true},
	{"bignum: a bignum is a number", `{"type":"number"}`, `98249283749234923498293171823948729348710298301928331`, true},
	{"bignum: a float bignum is not a string", `{"type":"string"}`, `98249283749234923498293171823948729348710298301928331.1`, false},
	{"bignum: maximum, high integer", `{"maximum":18446744073709551615}`, `18446744073709551600`, true},
	{"bignum: maximum, high integer float", `{"maximum":18446744073709551615}`, `18446744073709551600.0`, true},
	{"bignum: maximum, high non-integer", `{"maximum":18446744073709551615}`, `18446744073709551600.1`, true},
	// The suite also lists 972783798187987123879878123 as invalid here, which
	// only holds after float64 rounding; compared exactly it is below the bound.
	{"bignum: exclusiveMaximum, high integer below (exact)", `{"exclusiveMaximum":972783798187987123879878123.18878137}`, `972783798187987123879878123`, true},
	{"bignum: exclusiveMaximum, high float integer", `{"exclusiveMaximum":972783798187987123879878123.18878137}`, `972783798187987123879878124.0`, false},
	{"bignum: exclusiveMaximum, high non-integer", `{"exclusiveMaximum":972783798187987123879878123.18878137}`, `972783798187987123879878123.188781371`, false},
	{"bignum: minimum, very negative integer", `{"minimum":-18446744073709551615}`, `-18446744073709551600`, true},
	{"bignum: minimum, very negative non-integer", `{"minimum":-18446744073709551615}`, `-18446744073709551600.1`, true},
	{"bignum: exclusiveMinimum, very negative integer", `{"exclusiveMinimum":-972783798187987123879878123.18878137}`, `-972783798187987123879878124`, false},
	{"bignum: exclusiveMinimum, very negative equal", `{"exclusiveMinimum":-972783798187987123879878123.18878137}`, `-972783798187987123879878123.18878137`, false},
	// properties.json
	{"properties: both present and valid", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `{"foo":1,"bar":"baz"}`, true},
	{"properties: one invalid", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `{"foo":1,"bar":{}}`, false},
	{"properties: both invalid", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `{"foo":[],"bar":{}}`, false},
	{"properties: doesn't invalidate other properties", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `{"quux":[]}`, true},
	{"properties: ignores arrays", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `[]`, true},
	{"properties: ignores other non-objects", `{"properties":{"foo":{"type":"integer"},"bar":{"type":"string"}}}`, `12`, true},
	{"properties with boolean schema: no property present", `{"properties":{"foo":true,"bar":false}}`, `{}`, true},
	{"properties with boolean schema: only true property", `{"properties":{"foo":true,"bar":false}}`, `{"foo":1}`, true},
	{"properties with boolean schema: only false property", `{"properties":{"foo":true,"bar":false}}`, `{"bar":2}`, false},
	{"properties with null valued instance properties", `{"properties":{"foo":{"type":"null"}}}`, `{"foo":null}`, true},
	{"properties whose names are JavaScript object property names", `{"properties":{"__proto__":{"type":"number"},"constructor":{"type":"number"}}}`, `{"__proto__":"foo"}`, false},
	// required.json
	{"required: present", `{"properties":{"foo":{},"bar":{}},"required":["foo"]}`, `{"foo":1}`, true},
	{"required: non-present", `{"properties":{"foo":{},"bar":{}},"required":["foo"]}`, `{"bar":1}`, false},
	{"required: ignores arrays", `{"properties":{"foo":{},"bar":{}},"required":["foo"]}`, `[]`, true},
	{"required: ignores strings", `{"properties":{"foo":{},"bar":{}},"required":["foo"]}`, `""`, true},
	{"required: ignores other non-objects", `{"properties":{"foo":{},"bar":{}},"required":["foo"]}`, `12`, true},
	{"required default validation: not required by default", `{"properties":{"foo":{}}}`, `{}`, true},
	{"required with empty array", `{"properties":{"foo":{}},"required":[]}`, `{}`, true},
	{"required with escaped characters: all present", `{"required":["foo\nbar","foo\"bar","foo\\bar","foo\rbar","foo\tbar","foo\fbar"]}`, `{"foo\nbar":1,"foo\"bar":1,"foo\\bar":1,"foo\rbar":1,"foo\tbar":1,"foo\fbar":1}`, true},
	{"required with escaped characters: some missing", `{"required":["foo\nbar","foo\"bar","foo\\bar","foo\rbar","foo\tbar","foo\fbar"]}`, `{"foo\nbar":"1","foo\"bar":"1"}`, false},
	{"required JavaScript property names: none present", `{"required":["__proto__","toString","constructor"]}`, `{}`, false},
	{"required JavaScript property names: all present", `{"required":["__proto__","toString","constructor"]}`, `{"__proto__":12,"toString":{"length":"foo"},"constructor":{"length":37}}`, true},
	// additionalProperties.json
	{"additionalProperties false: no additional properties", `{"properties":{"foo":{},"bar":{}},"patternProperties":{"^v":{}},"additionalProperties":false}`, `{"foo":1}`, true},
	{"additionalProperties false: an additional property", `{"properties":{"foo":{},"bar":{}},"patternProperties":{"^v":{}},"additionalProperties":false}`, `{"foo":1,"bar":2,"quux":"boom"}`, false},
	{"additionalProperties false: ignores arrays", `{"properties":{"foo":{},"bar":{}},"patternProperties":{"^v":{}},"additionalProperties":false}`, `[1,2,3]`, true},
	{"additionalProperties false: ignores strings", `{"properties":{"foo":{},"bar":{}},"patternProperties":{"^v":{}},"additionalProperties":false}`, `"foobarbaz"`, true},
	{"additionalProperties false: patternProperties are not additional", `{"properties":{"foo":{},"bar":{}},"patternProperties":{"^v":{}},"additionalProperties":false}`, `{"foo":1,"vroom":2}`, true},
	{"additionalProperties non-ASCII pattern: matching", `{"patternProperties":{"^á":{}},"additionalProperties":false}`, `{"ármányos":2}`, true},
	{"additionalProperties non-ASCII pattern: not matching", `{"patternProperties":{"^á":{}},"additionalProperties":false}`, `{"élmény":2}`, false},
	{"additionalProperties schema: no additional", `{"properties":{"foo":{},"bar":{}},"additionalProperties":{"type":"boolean"}}`, `{"foo":1}`, true},
	{"additionalProperties schema: additional valid", `{"properties":{"foo":{},"bar":{}},"additionalProperties":{"type":"boolean"}}`, `{"foo":1,"bar":2,"quux":true}`, true},
	{"additionalProperties schema: additional invalid", `{"properties":{"foo":{},"bar":{}},"additionalProperties":{"type":"boolean"}}`, `{"foo":1,"bar":2,"quux":12}`, false},
	{"additionalProperties by itself: valid", `{"additionalProperties":{"type":"boolean"}}`, `{"foo":true}`, true},
	{"additionalProperties by itself: invalid", `{"additionalProperties":{"type":"boolean"}}`, `{"foo":1}`, false},
	{"additionalProperties allowed by default", `{"properties":{"foo":{},"bar":{}}}`, `{"foo":1,"bar":2,"quux":true}`, true},
	{"additionalProperties does not look in applicators", `{"allOf":[{"properties":{"foo":{}}}],"additionalProperties":{"type":"boolean"}}`, `{"foo":1,"bar":true}`, false},
	{"additionalProperties with null valued instance properties", `{"additionalProperties":{"type":"null"}}`, `{"foo":null}`, true},
	// items.json
	{"items schema: valid items", `{"items":{"type":"integer"}}`, `[1,2,3]`, true},
	{"items schema: wrong type of items", `{"items":{"type":"integer"}}`, `[1,"x"]`, false},
	{"items schema: ignores non-arrays", `{"items":{"type":"integer"}}`, `{"foo":"bar"}`, true},
	{"items schema: JavaScript pseudo-array", `{"items":{"type":"integer"}}`, `{"0":"invalid","length":1}`, true},
	{"items true: any array", `{"items":true}`, `[1,"foo",true]`, true},
	{"items false: any non-empty array is invalid", `{"items":false}`, `[1,"foo",true]`, false},
	{"items false: empty array is valid", `{"items":false}`, `[]`, true},
	{"items and subitems: valid", `{"$defs":{"item":{"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/sub-item"},{"$ref":"#/$defs/sub-item"}]},"sub-item":{"type":"object","required":["foo"]}},"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"}]}`, `[[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}]]`, true},
	{"items and subitems: too many items", `{"$defs":{"item":{"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/sub-item"},{"$ref":"#/$defs/sub-item"}]},"sub-item":{"type":"object","required":["foo"]}},"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"}]}`, `[[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}]]`, false},
	{"items and subitems: too many sub-items", `{"$defs":{"item":{"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/sub-item"},{"$ref":"#/$defs/sub-item"}]},"sub-item":{"type":"object","required":["foo"]}},"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"}]}`, `[[{"foo":null},{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}]]`, false},
	{"items and subitems: wrong sub-item", `{"$defs":{"item":{"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/sub-item"},{"$ref":"#/$defs/sub-item"}]},"sub-item":{"type":"object","required":["foo"]}},"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"}]}`, `[[{},{"foo":null}],[{"foo":null},{"foo":null}],[{"foo":null},{"foo":null}]]`, false},
	{"items and subitems: fewer items", `{"$defs":{"item":{"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/sub-item"},{"$ref":"#/$defs/sub-item"}]},"sub-item":{"type":"object","required":["foo"]}},"type":"array","items":false,"prefixItems":[{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"},{"$ref":"#/$defs/item"}]}`, `[[{"foo":null}],[{"foo":null}]]`, true},
	{"nested items: valid", `{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"number"}}}}}`, `[[[[1]],[[2],[3]]],[[[4],[5],[6]]]]`, true},
	{"nested items: invalid type", `{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"number"}}}}}`, `[[[["1"]],[[2],[3]]],[[[4],[5],[6]]]]`, false},
	{"nested items: not deep enough", `{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"number"}}}}}`, `[[[1],[2],[3]],[[4],[5],[6]]]`, false},
	{"prefixItems with no additional items: equal number", `{"prefixItems":[{},{},{}],"items":false}`, `[1,2,3]`, true},
	{"prefixItems with no additional items: fewer", `{"prefixItems":[{},{},{}],"items":false}`, `[1]`, true},
	{"prefixItems with no additional items: additional", `{"prefixItems":[{},{},{}],"items":false}`, `[1,2,3,4]`, false},
	{"items should not look in applicators: invalid", `{"allOf":[{"prefixItems":[{"minimum":3}]}],"items":{"minimum":5}}`, `[3,5]`, false},
	{"items should not look in applicators: valid", `{"allOf":[{"prefixItems":[{"minimum":3}]}],"items":{"minimum":5}}`, `[5,5]`, true},
	{"prefixItems adjusts the start of items: valid", `{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`, `["x",2,3]`, true},
	{"prefixItems adjusts the start of items: wrong second", `{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`, `["x","y"]`, false},
	{"items with null instance elements", `{"items":{"type":"null"}}`, `[null]`, true},
	// prefixItems.json
	{"prefixItems: correct types", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `[1,"foo"]`, true},
	{"prefixItems: wrong types", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `["foo",1]`, false},
	{"prefixItems: incomplete array", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `[1]`, true},
	{"prefixItems: array with additional items", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `[1,"foo",true]`, true},
	{"prefixItems: empty array", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `[]`, true},
	{"prefixItems: JavaScript pseudo-array", `{"prefixItems":[{"type":"integer"},{"type":"string"}]}`, `{"0":"invalid","1":"valid","length":2}`, true},
	{"prefixItems boolean schemas: first true", `{"prefixItems":[true,false]}`, `[1]`, true},
	{"prefixItems boolean schemas: second false", `{"prefixItems":[true,false]}`, `[1,"foo"]`, false},
	{"prefixItems boolean schemas: empty", `{"prefixItems":[true,false]}`, `[]`, true},
	// enum.json
	{"enum simple: one of the enum", `{"enum":[1,2,3]}`, `1`, true},
	{"enum simple: something else", `{"enum":[1,2,3]}`, `4`, false},
	{"enum heterogeneous: one of the enum", `{"enum":[6,"foo",[],true,{"foo":12}]}`, `[]`, true},
	{"enum heterogeneous: something else", `{"enum":[6,"foo",[],true,{"foo":12}]}`, `null`, false},
	{"enum heterogeneous: objects are deep compared", `{"enum":[6,"foo",[],true,{"foo":12}]}`, `{"foo":false}`, false},
	{"enum heterogeneous: valid object matches", `{"enum":[6,"foo",[],true,{"foo":12}]}`, `{"foo":12}`, true},
	{"enum heterogeneous: extra properties", `{"enum":[6,"foo",[],true,{"foo":12}]}`, `{"foo":12,"boo":42}`, false},
	{"enum with null: null", `{"enum":[6,null]}`, `null`, true},
	{"enum with null: number", `{"enum":[6,null]}`, `6`, true},
	{"enum with null: something else", `{"enum":[6,null]}`, `"test"`, false},
	{"enums in properties: both valid", `{"type":"object","properties":{"foo":{"enum":["foo"]},"bar":{"enum":["bar"]}},"required":["bar"]}`, `{"foo":"foo","bar":"bar"}`, true},
	{"enums in properties: wrong foo", `{"type":"object","properties":{"foo":{"enum":["foo"]},"bar":{"enum":["bar"]}},"required":["bar"]}`, `{"foo":"foot","bar":"bar"}`, false},
	{"enums in properties: missing optional", `{"type":"object","properties":{"foo":{"enum":["foo"]},"bar":{"enum":["bar"]}},"required":["bar"]}`, `{"bar":"bar"}`, true},
	{"enums in properties: missing required", `{"type":"object","properties":{"foo":{"enum":["foo"]},"bar":{"enum":["bar"]}},"required":["bar"]}`, `{"foo":"foo"}`, false},
	{"enum with escaped characters: member 1", `{"enum":["foo\nbar","foo\rbar"]}`, `"foo\nbar"`, true},
	{"enum with escaped characters: another string", `{"enum":["foo\nbar","foo\rbar"]}`, `"abc"`, false},
	{"enum false does not match 0", `{"enum":[false]}`, `0`, false},
	{"enum false matches false", `{"enum":[false]}`, `false`, true},
	{"enum [false] does not match [0.0]", `{"enum":[[false]]}`, `[0.0]`, false},
	{"enum true does not match 1.0", `{"enum":[true]}`, `1.0`, false},
	{"enum 0 does not match false", `{"enum":[0]}`, `false`, false},
	{"enum 0 matches float zero", `{"enum":[0]}`, `0.0`, true},
	{"enum [1] matches [1.0]", `{"enum":[[1]]}`, `[1.0]`, true},
	{"enum [1] does not match [true]", `{"enum":[[1]]}`, `[true]`, false},
	{"enum nul characters: match", `{"enum":["hello\u0000there"]}`, `"hello\u0000there"`, true},
	{"enum nul characters: lacking nul", `{"enum":["hello\u0000there"]}`, `"hellothere"`, false},
	// const.json
	{"const: same value", `{"const":2}`, `2`, true},
	{"const: another value", `{"const":2}`, `5`, false},
	{"const: another type", `{"const":2}`, `"a"`, false},
	{"const object: same object", `{"const":{"foo":"bar","baz":"bax"}}`, `{"foo":"bar","baz":"bax"}`, true},
	{"const object: different property order", `{"const":{"foo":"bar","baz":"bax"}}`, `{"baz":"bax","foo":"bar"}`, true},
	{"const object: another object", `{"const":{"foo":"bar","baz":"bax"}}`, `{"foo":"bar"}`, false},
	{"const object: another type", `{"const":{"foo":"bar","baz":"bax"}}`, `[1,2]`, false},
	{"const array: same array", `{"const":[{"foo":"bar"}]}`, `[{"foo":"bar"}]`, true},
	{"const array: another array item", `{"const":[{"foo":"bar"}]}`, `[2]`, false},
	{"const array: additional items", `{"const":[{"foo":"bar"}]}`, `[1,2,3]`, false},
	{"const null: null", `{"const":null}`, `null`, true},
	{"const null: not null", `{"const":null}`, `0`, false},
	{"const false: integer zero", `{"const":false}`, `0`, false},
	{"const false: float zero", `{"const":false}`, `0.0`, false},
	{"const true: float one", `{"const":true}`, `1.0`, false},
	{"const [false]: [0]", `{"const":[false]}`, `[0]`, false},
	{"const {a:false}: {a:0}", `{"const":{"a":false}}`, `{"a":0}`, false},
	{"const 0: false", `{"const":0}`, `false`, false},
	{"const 0: float zero", `{"const":0}`, `0.0`, true},
	{"const 0: empty object", `{"const":0}`, `{}`, false},
	{"const 0: empty string", `{"const":0}`, `""`, false},
	{"const 1: true", `{"const":1}`, `true`, false},
	{"const 1: float one", `{"const":1}`, `1.0`, true},
	{"const -2.0: integer -2", `{"const":-2.0}`, `-2`, true},
	{"const -2.0: integer 2", `{"const":-2.0}`, `2`, false},
	{"const -2.0: float -2.00001", `{"const":-2.0}`, `-2.00001`, false},
	{"const 2^53: integer", `{"const":9007199254740992}`, `9007199254740992`, true},
	{"const 2^53: integer minus one", `{"const":9007199254740992}`, `9007199254740991`, false},
	{"const 2^53: float", `{"const":9007199254740992}`, `9007199254740992.0`, true},
	{"const 2^53: float minus one", `{"const":9007199254740992}`, `9007199254740991.0`, false},
	{"const nul characters: lacking nul", `{"const":"hello\u0000there"}`, `"hellothere"`, false},
	{"const same look, different code point", `{"const":"μ"}`, `"µ"`, false},
	{"const same look, combining marks", `{"const":"\u00e4"}`, `"a\u0308"`, false},
	// minimum.json, maximum.json, exclusiveMinimum.json, exclusiveMaximum.json
	{"minimum: above", `{"minimum":1.1}`, `2.6`, true},
	{"minimum: boundary", `{"minimum":1.1}`, `1.1`, true},
	{"minimum: below", `{"minimum":1.1}`, `0.6`, false},
	{"minimum: ignores non-numbers", `{"minimum":1.1}`, `"x"`, true},
	{"minimum signed integer: negative above", `{"minimum":-2}`, `-1`, true},
	{"minimum signed integer: boundary", `{"minimum":-2}`, `-2`, true},
	{"minimum signed integer: boundary float", `{"minimum":-2}`, `-2.0`, true},
	{"minimum signed integer: float below", `{"minimum":-2}`, `-2.0001`, false},
	{"minimum signed integer: int below", `{"minimum":-2}`, `-3`, false},
	{"maximum: below", `{"maximum":3.0}`, `2.6`, true},
	{"maximum: boundary", `{"maximum":3.0}`, `3.0`, true},
	{"maximum: above", `{"maximum":3.0}`, `3.5`, false},
	{"maximum: ignores non-numbers", `{"maximum":3.0}`, `"x"`, true},
	{"maximum unsigned integer: below", `{"maximum":300}`, `299.97`, true},
	{"maximum unsigned integer: boundary integer", `{"maximum":300}`, `300`, true},
	{"maximum unsigned integer: boundary float", `{"maximum":300}`, `300.00`, true},
	{"maximum unsigned integer: above", `{"maximum":300}`, `300.5`, false},
	{"exclusiveMinimum: above", `{"exclusiveMinimum":1.1}`, `1.2`, true},
	{"exclusiveMinimum: boundary", `{"exclusiveMinimum":1.1}`, `1.1`, false},
	{"exclusiveMinimum: below", `{"exclusiveMinimum":1.1}`, `0.6`, false},
	{"exclusiveMinimum: ignores non-numbers", `{"exclusiveMinimum":1.1}`, `"x"`, true},
	{"exclusiveMaximum: below", `{"exclusiveMaximum":3.0}`, `2.2`, true},
	{"exclusiveMaximum: boundary", `{"exclusiveMaximum":3.0}`, `3.0`, false},
	{"exclusiveMaximum: above", `{"exclusiveMaximum":3.0}`, `3.5`, false},
	{"exclusiveMaximum: ignores non-numbers", `{"exclusiveMaximum":3.0}`, `"x"`, true},
	// multipleOf.json, optional/float-overflow.json
	{"multipleOf int: int by int", `{"multipleOf":2}`, `10`, true},
	{"multipleOf int: int by int fail", `{"multipleOf":2}`, `7`, false},
	{"multipleOf int: ignores non-numbers", `{"multipleOf":2}`, `"foo"`, true},
	{"multipleOf number: zero", `{"multipleOf":1.5}`, `0`, true},
	{"multipleOf number: 4.5", `{"multipleOf":1.5}`, `4.5`, true},
	{"multipleOf number: 35", `{"multipleOf":1.5}`, `35`, false},
	{"multipleOf small number: 0.0075", `{"multipleOf":0.0001}`, `0.0075`, true},
	{"multipleOf small number: 0.00751", `{"multipleOf":0.0001}`, `0.00751`, false},
	{"multipleOf float division overflow: 1e308 integer", `{"type":"integer","multipleOf":0.123456789}`, `1e308`, false},
	{"multipleOf 0.5 with overflow handled", `{"type":"integer","multipleOf":0.5}`, `1e308`, true},
	{"multipleOf small multiple of large integer", `{"type":"integer","multipleOf":1e-8}`, `12391239123`, true},
	// minLength.json, maxLength.json
	{"minLength: longer", `{"minLength":2}`, `"foo"`, true},
	{"minLength: exact", `{"minLength":2}`, `"fo"`, true},
	{"minLength: too short", `{"minLength":2}`, `"f"`, false},
	{"minLength: ignores non-strings", `{"minLength":2}`, `1`, true},
	{"minLength: one grapheme is not long enough", `{"minLength":2}`, `"\uD83D\uDCA9"`, false},
	{"minLength decimal: too short", `{"minLength":2.0}`, `"f"`, false},
	{"maxLength: shorter", `{"maxLength":2}`, `"f"`, true},
	{"maxLength: exact", `{"maxLength":2}`, `"fo"`, true},
	{"maxLength: too long", `{"maxLength":2}`, `"foo"`, false},
	{"maxLength: ignores non-strings", `{"maxLength":2}`, `100`, true},
	{"maxLength: two graphemes is long enough", `{"maxLength":2}`, `"\uD83D\uDCA9\uD83D\uDCA9"`, true},
	{"maxLength decimal: too long", `{"maxLength":2.0}`, `"foo"`, false},
	// pattern.json
	{"pattern: matching", `{"pattern":"^a*$"}`, `"aaa"`, true},
	{"pattern: non-matching", `{"pattern":"^a*$"}`, `"abc"`, false},
	{"pattern: ignores booleans", `{"pattern":"^a*$"}`, `true`, true},
	{"pattern: ignores integers", `{"pattern":"^a*$"}`, `123`, true},
	{"pattern: ignores objects", `{"pattern":"^a*$"}`, `{}`, true},
	{"pattern is not anchored", `{"pattern":"a+"}`, `"xxaayy"`, true},
	// minItems.json, maxItems.json
	{"minItems: longer", `{"minItems":1}`, `[1,2]`, true},
	{"minItems: exact", `{"minItems":1}`, `[1]`, true},
	{"minItems: too short", `{"minItems":1}`, `[]`, false},
	{"minItems: ignores non-arrays", `{"minItems":1}`, `""`, true},
	{"minItems decimal: too short", `{"minItems":1.0}`, `[]`, false},
	{"maxItems: shorter", `{"maxItems":2}`, `[1]`, true},
	{"maxItems: exact", `{"maxItems":2}`, `[1,2]`, true},
	{"maxItems: too long", `{"maxItems":2}`, `[1,2,3]`, false},
	{"maxItems: ignores non-arrays", `{"maxItems":2}`, `"foobar"`, true},
	{"maxItems decimal: too long", `{"maxItems":2.0}`, `[1,2,3]`, false},
	// uniqueItems.json
	{"uniqueItems: unique integers", `{"uniqueItems":true}`, `[1,2]`, true},
	{"uniqueItems: non-unique integers", `{"uniqueItems":true}`, `[1,1]`, false},
	{"uniqueItems: non-unique of more than two", `{"uniqueItems":true}`, `[1,2,1]`, false},
	{"uniqueItems: numbers unique if mathematically unequal", `{"uniqueItems":true}`, `[1.0,1.00,1]`, false},
	{"uniqueItems: false is not equal to zero", `{"uniqueItems":true}`, `[0,false]`, true},
	{"uniqueItems: true is not equal to one", `{"uniqueItems":true}`, `[1,true]`, true},
	{"uniqueItems: unique strings", `{"uniqueItems":true}`, `["foo","bar","baz"]`, true},
	{"uniqueItems: non-unique strings", `{"uniqueItems":true}`, `["foo","bar","foo"]`, false},
	{"uniqueItems: property order of objects is ignored", `{"uniqueItems":true}`, `[{"foo":"bar","bar":"foo"},{"bar":"foo","foo":"bar"}]`, false},
	{"uniqueItems: unique nested objects", `{"uniqueItems":true}`, `[{"foo":{"bar":{"baz":true}}},{"foo":{"bar":{"baz":false}}}]`, true},
	{"uniqueItems: non-unique nested objects", `{"uniqueItems":true}`, `[{"foo":{"bar":{"baz":true}}},{"foo":{"bar":{"baz":true}}}]`, false},
	{"uniqueItems: non-unique arrays", `{"uniqueItems":true}`, `[["foo"],["foo"]]`, false},
	{"uniqueItems: [1] and [true] are unique", `{"uniqueItems":true}`, `[[1],[true]]`, true},
	{"uniqueItems: unique heterogeneous types", `{"uniqueItems":true}`, `[{},[1],true,null,1,"{}"]`, true},
	{"uniqueItems: non-unique heterogeneous types", `{"uniqueItems":true}`, `[{},[1],true,null,{},1]`, false},
	{"uniqueItems: {a:false} and {a:0} are unique", `{"uniqueItems":true}`, `[{"a":false},{"a":0}]`, true},
	{"uniqueItems with prefixItems: [false,true]", `{"prefixItems":[{"type":"boolean"},{"type":"boolean"}],"uniqueItems":true}`, `[false,true]`, true},
	{"uniqueItems with prefixItems: [true,true]", `{"prefixItems":[{"type":"boolean"},{"type":"boolean"}],"uniqueItems":true}`, `[true,true]`, false},
	{"uniqueItems with prefixItems: extended non-unique", `{"prefixItems":[{"type":"boolean"},{"type":"boolean"}],"uniqueItems":true}`, `[false,true,"foo","foo"]`, false},
	{"uniqueItems with items false: extra items", `{"prefixItems":[{"type":"boolean"},{"type":"boolean"}],"uniqueItems":true,"items":false}`, `[false,true,null]`, false},
	{"uniqueItems false: non-unique", `{"uniqueItems":false}`, `[1,1]`, true},
	{"uniqueItems false: non-unique objects", `{"uniqueItems":false}`, `[{"foo":"bar"},{"foo":"bar"}]`, true},
	// minProperties.json, maxProperties.json
	{"minProperties: longer", `{"minProperties":1}`, `{"foo":1,"bar":2}`, true},
	{"minProperties: exact", `{"minProperties":1}`, `{"foo":1}`, true},
	{"minProperties: too short", `{"minProperties":1}`, `{}`, false},
	{"minProperties: ignores arrays", `{"minProperties":1}`, `[]`, true},
	{"minProperties: ignores strings", `{"minProperties":1}`, `""`, true},
	{"minProperties: ignores other non-objects", `{"minProperties":1}`, `12`, true},
	{"minProperties decimal: too short", `{"minProperties":1.0}`, `{}`, false},
	{"maxProperties: shorter", `{"maxProperties":2}`, `{"foo":1}`, true},
	{"maxProperties: exact", `{"maxProperties":2}`, `{"foo":1,"bar":2}`, true},
	{"maxProperties: too long", `{"maxProperties":2}`, `{"foo":1,"bar":2,"baz":3}`, false},
	{"maxProperties: ignores arrays", `{"maxProperties":2}`, `[1,2,3]`, true},
	{"maxProperties 0: no properties", `{"maxProperties":0}`, `{}`, true},
	{"maxProperties 0: one property", `{"maxProperties":0}`, `{"foo":1}`, false},
	// allOf.json
	{"allOf: valid", `{"allOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"foo":"baz","bar":2}`, true},
	{"allOf: mismatch second", `{"allOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"foo":"baz"}`, false},
	{"allOf: mismatch first", `{"allOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"bar":2}`, false},
	{"allOf: wrong type", `{"allOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"foo":"baz","bar":"quux"}`, false},
	{"allOf with base schema: valid", `{"properties":{"bar":{"type":"integer"}},"required":["bar"],"allOf":[{"properties":{"foo":{"type":"string"}},"required":["foo"]},{"properties":{"baz":{"type":"null"}},"required":["baz"]}]}`, `{"foo":"quux","bar":2,"baz":null}`, true},
	{"allOf with base schema: mismatch base", `{"properties":{"bar":{"type":"integer"}},"required":["bar"],"allOf":[{"properties":{"foo":{"type":"string"}},"required":["foo"]},{"properties":{"baz":{"type":"null"}},"required":["baz"]}]}`, `{"foo":"quux","baz":null}`, false},
	{"allOf simple types: valid", `{"allOf":[{"maximum":30},{"minimum":20}]}`, `25`, true},
	{"allOf simple types: mismatch one", `{"allOf":[{"maximum":30},{"minimum":20}]}`, `35`, false},
	{"allOf with boolean schemas, all true", `{"allOf":[true,true]}`, `"foo"`, true},
	{"allOf with boolean schemas, some false", `{"allOf":[true,false]}`, `"foo"`, false},
	{"allOf with one empty schema", `{"allOf":[{}]}`, `1`, true},
	{"nested allOf: null", `{"allOf":[{"allOf":[{"type":"null"}]}]}`, `null`, true},
	{"nested allOf: non-null", `{"allOf":[{"allOf":[{"type":"null"}]}]}`, `123`, false},
	// anyOf.json
	{"anyOf: first valid", `{"anyOf":[{"type":"integer"},{"minimum":2}]}`, `1`, true},
	{"anyOf: second valid", `{"anyOf":[{"type":"integer"},{"minimum":2}]}`, `2.5`, true},
	{"anyOf: both valid", `{"anyOf":[{"type":"integer"},{"minimum":2}]}`, `3`, true},
	{"anyOf: neither valid", `{"anyOf":[{"type":"integer"},{"minimum":2}]}`, `1.5`, false},
	{"anyOf with base schema: mismatch base", `{"type":"string","anyOf":[{"maxLength":2},{"minLength":4}]}`, `3`, false},
	{"anyOf with base schema: one valid", `{"type":"string","anyOf":[{"maxLength":2},{"minLength":4}]}`, `"foobar"`, true},
	{"anyOf with base schema: both invalid", `{"type":"string","anyOf":[{"maxLength":2},{"minLength":4}]}`, `"foo"`, false},
	{"anyOf with boolean schemas, some true", `{"anyOf":[true,false]}`, `"foo"`, true},
	{"anyOf with boolean schemas, all false", `{"anyOf":[false,false]}`, `"foo"`, false},
	{"anyOf complex types: first valid", `{"anyOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"bar":2}`, true},
	{"anyOf complex types: neither valid", `{"anyOf":[{"properties":{"bar":{"type":"integer"}},"required":["bar"]},{"properties":{"foo":{"type":"string"}},"required":["foo"]}]}`, `{"foo":2,"bar":"quux"}`, false},
	{"anyOf with one empty schema: string", `{"anyOf":[{"type":"number"},{}]}`, `"foo"`, true},
	{"nested anyOf: null", `{"anyOf":[{"anyOf":[{"type":"null"}]}]}`, `null`, true},
	{"nested anyOf: non-null", `{"anyOf":[{"anyOf":[{"type":"null"}]}]}`, `123`, false},
	// oneOf.json
	{"oneOf: first valid", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `1`, true},
	{"oneOf: second valid", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `2.5`, true},
	{"oneOf: both valid", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `3`, false},
	{"oneOf: neither valid", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `1.5`, false},
	{"oneOf with base schema: mismatch base", `{"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]}`, `3`, false},
	{"oneOf with base schema: one valid", `{"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]}`, `"foobar"`, true},
	{"oneOf with base schema: both valid", `{"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]}`, `"foo"`, false},
	{"oneOf boolean schemas, all true", `{"oneOf":[true,true,true]}`, `"foo"`, false},
	{"oneOf boolean schemas, one true", `{"oneOf":[true,false,false]}`, `"foo"`, true},
	{"oneOf boolean schemas, more than one true", `{"oneOf":[true,true,false]}`, `"foo"`, false},
	{"oneOf boolean schemas, all false", `{"oneOf":[false,false,false]}`, `"foo"`, false},
	{"oneOf with empty schema: one valid", `{"oneOf":[{"type":"number"},{}]}`, `"foo"`, true},
	{"oneOf with empty schema: both valid", `{"oneOf":[{"type":"number"},{}]}`, `123`, false},
	{"oneOf with required: both invalid", `{"type":"object","oneOf":[{"required":["foo","bar"]},{"required":["foo","baz"]}]}`, `{"bar":2}`, false},
	{"oneOf with required: first valid", `{"type":"object","oneOf":[{"required":["foo","bar"]},{"required":["foo","baz"]}]}`, `{"foo":1,"bar":2}`, true},
	{"oneOf with required: both valid", `{"type":"object","oneOf":[{"required":["foo","bar"]},{"required":["foo","baz"]}]}`, `{"foo":1,"bar":2,"baz":3}`, false},
	{"nested oneOf: null", `{"oneOf":[{"oneOf":[{"type":"null"}]}]}`, `null`, true},
	{"nested oneOf: non-null", `{"oneOf":[{"oneOf":[{"type":"null"}]}]}`, `123`, false},
	// not.json
	{"not: allowed", `{"not":{"type":"integer"}}`, `"foo"`, true},
	{"not: disallowed", `{"not":{"type":"integer"}}`, `1`, false},
	{"not multiple types: valid", `{"not":{"type":["integer","boolean"]}}`, `"foo"`, true},
	{"not multiple types: mismatch", `{"not":{"type":["integer","boolean"]}}`, `true`, false},
	{"not more complex: match", `{"not":{"type":"object","properties":{"foo":{"type":"string"}}}}`, `1`, true},
	{"not more complex: other match", `{"not":{"type":"object","properties":{"foo":{"type":"string"}}}}`, `{"foo":1}`, true},
	{"not more complex: mismatch", `{"not":{"type":"object","properties":{"foo":{"type":"string"}}}}`, `{"foo":"bar"}`, false},
	{"forbidden property: present", `{"properties":{"foo":{"not":{}}}}`, `{"foo":1,"bar":2}`, false},
	{"forbidden property: absent", `{"properties":{"foo":{"not":{}}}}`, `{"bar":1,"baz":2}`, true},
	{"not with boolean schema true", `{"not":true}`, `"foo"`, false},
	{"not with boolean schema false", `{"not":false}`, `"foo"`, true},
	{"double negation", `{"not":{"not":{}}}`, `"foo"`, true},
	// boolean_schema.json
	{"boolean schema true: number", `true`, `1`, true},
	{"boolean schema true: object", `true`, `{"foo":"bar"}`, true},
	{"boolean schema true: null", `true`, `null`, true},
	{"boolean schema false: number", `false`, `1`, false},
	{"boolean schema false: empty object", `false`, `{}`, false},
	{"boolean schema false: null", `false`, `null`, false},
	// ref.json, infinite-loop-detection.json
	{"ref root pointer: match", `{"properties":{"foo":{"$ref":"#"}},"additionalProperties":false}`, `{"foo":false}`, true},
	{"ref root pointer: recursive match", `{"properties":{"foo":{"$ref":"#"}},"additionalProperties":false}`, `{"foo":{"foo":false}}`, true},
	{"ref root pointer: mismatch", `{"properties":{"foo":{"$ref":"#"}},"additionalProperties":false}`, `{"bar":false}`, false},
	{"ref root pointer: recursive mismatch", `{"properties":{"foo":{"$ref":"#"}},"additionalProperties":false}`, `{"foo":{"bar":false}}`, false},
	{"ref relative pointer to object: match", `{"properties":{"foo":{"type":"integer"},"bar":{"$ref":"#/properties/foo"}}}`, `{"bar":3}`, true},
	{"ref relative pointer to object: mismatch", `{"properties":{"foo":{"type":"integer"},"bar":{"$ref":"#/properties/foo"}}}`, `{"bar":true}`, false},
	{"ref relative pointer to array: match", `{"prefixItems":[{"type":"integer"},{"$ref":"#/prefixItems/0"}]}`, `[1,2]`, true},
	{"ref relative pointer to array: mismatch", `{"prefixItems":[{"type":"integer"},{"$ref":"#/prefixItems/0"}]}`, `[1,"foo"]`, false},
	{"ref escaped pointer: slash invalid", `{"$defs":{"tilde~field":{"type":"integer"},"slash/field":{"type":"integer"},"percent%field":{"type":"integer"}},"properties":{"tilde":{"$ref":"#/$defs/tilde~0field"},"slash":{"$ref":"#/$defs/slash~1field"},"percent":{"$ref":"#/$defs/percent%25field"}}}`, `{"slash":"aoeu"}`, false},
	{"ref escaped pointer: tilde invalid", `{"$defs":{"tilde~field":{"type":"integer"},"slash/field":{"type":"integer"},"percent%field":{"type":"integer"}},"properties":{"tilde":{"$ref":"#/$defs/tilde~0field"},"slash":{"$ref":"#/$defs/slash~1field"},"percent":{"$ref":"#/$defs/percent%25field"}}}`, `{"tilde":"aoeu"}`, false},
	{"ref escaped pointer: percent invalid", `{"$defs":{"tilde~field":{"type":"integer"},"slash/field":{"type":"integer"},"percent%field":{"type":"integer"}},"properties":{"tilde":{"$ref":"#/$defs/tilde~0field"},"slash":{"$ref":"#/$defs/slash~1field"},"percent":{"$ref":"#/$defs/percent%25field"}}}`, `{"percent":"aoeu"}`, false},
	{"ref escaped pointer: all valid", `{"$defs":{"tilde~field":{"type":"integer"},"slash/field":{"type":"integer"},"percent%field":{"type":"integer"}},"properties":{"tilde":{"$ref":"#/$defs/tilde~0field"},"slash":{"$ref":"#/$defs/slash~1field"},"percent":{"$ref":"#/$defs/percent%25field"}}}`, `{"slash":123,"tilde":123,"percent":123}`, true},
	{"ref nested refs: valid", `{"$defs":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/a"},"c":{"$ref":"#/$defs/b"}},"$ref":"#/$defs/c"}`, `5`, true},
	{"ref nested refs: invalid", `{"$defs":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/a"},"c":{"$ref":"#/$defs/b"}},"$ref":"#/$defs/c"}`, `"a"`, false},
	{"ref alongside siblings: valid", `{"$defs":{"reffed":{"type":"array"}},"properties":{"foo":{"$ref":"#/$defs/reffed","maxItems":2}}}`, `{"foo":[]}`, true},
	{"ref alongside siblings: maxItems invalid", `{"$defs":{"reffed":{"type":"array"}},"properties":{"foo":{"$ref":"#/$defs/reffed","maxItems":2}}}`, `{"foo":[1,2,3]}`, false},
	{"ref alongside siblings: ref invalid", `{"$defs":{"reffed":{"type":"array"}},"properties":{"foo":{"$ref":"#/$defs/reffed","maxItems":2}}}`, `{"foo":"string"}`, false},
	{"property named $ref: valid", `{"properties":{"$ref":{"type":"string"}}}`, `{"$ref":"a"}`, true},
	{"property named $ref: invalid", `{"properties":{"$ref":{"type":"string"}}}`, `{"$ref":2}`, false},
	{"property named $ref containing a $ref: invalid", `{"properties":{"$ref":{"$ref":"#/$defs/is-string"}},"$defs":{"is-string":{"type":"string"}}}`, `{"$ref":2}`, false},
	{"$ref to boolean schema true", `{"$ref":"#/$defs/bool","$defs":{"bool":true}}`, `"foo"`, true},
	{"$ref to boolean schema false", `{"$ref":"#/$defs/bool","$defs":{"bool":false}}`, `"foo"`, false},
	{"refs with quote: valid", `{"properties":{"foo\"bar":{"$ref":"#/$defs/foo%22bar"}},"$defs":{"foo\"bar":{"type":"number"}}}`, `{"foo\"bar":1}`, true},
	{"refs with quote: invalid", `{"properties":{"foo\"bar":{"$ref":"#/$defs/foo%22bar"}},"$defs":{"foo\"bar":{"type":"number"}}}`, `{"foo\"bar":"1"}`, false},
	{"naive replacement of $ref: enum is data, not a schema", `{"$defs":{"a_string":{"type":"string"}},"enum":[{"$ref":"#/$defs/a_string"}]}`, `"this is a string"`, false},
	{"naive replacement of $ref: exact enum match", `{"$defs":{"a_string":{"type":"string"}},"enum":[{"$ref":"#/$defs/a_string"}]}`, `{"$ref":"#/$defs/a_string"}`, true},
	{"ref to definitions (draft-07 spelling)", `{"definitions":{"a":{"type":"integer"}},"$ref":"#/definitions/a"}`, `"a"`, false},
	{"same schema location twice is not a loop: passing", `{"$defs":{"int":{"type":"integer"}},"allOf":[{"properties":{"foo":{"$ref":"#/$defs/int"}}},{"additionalProperties":{"$ref":"#/$defs/int"}}]}`, `{"foo":1}`, true},
	{"same schema location twice is not a loop: failing", `{"$defs":{"int":{"type":"integer"}},"allOf":[{"properties":{"foo":{"$ref":"#/$defs/int"}}},{"additionalProperties":{"$ref":"#/$defs/int"}}]}`, `{"foo":"a string"}`, false},
	{"recursive tree: valid", `{"type":"object","properties":{"meta":{"type":"string"},"nodes":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["meta","nodes"],"$defs":{"node":{"type":"object","properties":{"value":{"type":"number"},"subtree":{"$ref":"#"}},"required":["value"]}}}`, `{"meta":"root","nodes":[{"value":1,"subtree":{"meta":"child","nodes":[{"value":1.1},{"value":1.2}]}},{"value":2}]}`, true},
	{"recursive tree: invalid", `{"type":"object","properties":{"meta":{"type":"string"},"nodes":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["meta","nodes"],"$defs":{"node":{"type":"object","properties":{"value":{"type":"number"},"subtree":{"$ref":"#"}},"required":["value"]}}}`, `{"meta":"root","nodes":[{"value":1,"subtree":{"meta":"child","nodes":[{"value":"string is invalid"},{"value":1.2}]}}]}`, false},
	// unknownKeyword.json: unknown keywords (nullable included) are ignored
	{"unknown keyword is ignored", `{"nullable":true,"type":"string","x-vendor":{"type":"integer"}}`, `"foo"`, true},
	{"nullable is not a keyword", `{"nullable":true,"type":"string"}`, `null`, false},
	// optional/format/email.json
	{"email: a valid address", `{"format":"email"}`, `"joe.bloggs@example.com"`, true},
	{"email: ignores integers", `{"format":"email"}`, `12`, true},
	{"email: an invalid address", `{"format":"email"}`, `"2962"`, false},
	{"email: tilde in local part", `{"format":"email"}`, `"te~st@example.com"`, true},
	{"email: quoted string with a space", `{"format":"email"}`, `"\"joe bloggs\"@example.com"`, true},
	{"email: quoted string with a double dot", `{"format":"email"}`, `"\"joe..bloggs\"@example.com"`, true},
	{"email: quoted string with an @", `{"format":"email"}`, `"\"joe@bloggs\"@example.com"`, true},
	{"email: IPv4 address literal", `{"format":"email"}`, `"joe.bloggs@[127.0.0.1]"`, true},
	{"email: IPv6 address literal", `{"format":"email"}`, `"joe.bloggs@[IPv6:::1]"`, true},
	{"email: dot before local part", `{"format":"email"}`, `".test@example.com"`, false},
	{"email: dot after local part", `{"format":"email"}`, `"test.@example.com"`, false},
	{"email: two separated dots", `{"format":"email"}`, `"te.s.t@example.com"`, true},
	{"email: two subsequent dots", `{"format":"email"}`, `"te..st@example.com"`, false},
	{"email: invalid domain", `{"format":"email"}`, `"joe.bloggs@invalid=domain.com"`, false},
	{"email: invalid IPv4 literal", `{"format":"email"}`, `"joe.bloggs@[127.0.0.300]"`, false},
	{"email: two addresses", `{"format":"email"}`, `"user1@oceania.org, user2@oceania.org"`, false},
	{"email: local part is required", `{"format":"email"}`, `"@example.com"`, false},
	{"email: domain is required", `{"format":"email"}`, `"joe.bloggs@"`, false},
	{"email: unquoted space", `{"format":"email"}`, `"joe bloggs@example.com"`, false},
	{"email: empty quoted local part", `{"format":"email"}`, `"\"\"@iana.org"`, true},
	{"email: non-ASCII local part", `{"format":"email"}`, `"a\u00e9@iana.org"`, false},
	{"email: trailing line feed", `{"format":"email"}`, `"test@iana.org\n"`, false},
	{"email: escaped double quote", `{"format":"email"}`, `"\"\\\"\"@iana.org"`, true},
	{"email: unclosed double quote", `{"format":"email"}`, `"\"test@iana.org"`, false},
	{"email: two unquoted @", `{"format":"email"}`, `"a@b@c.org"`, false},
	{"email: label starting with a hyphen", `{"format":"email"}`, `"test@-iana.org"`, false},
	{"email: single-label domain", `{"format":"email"}`, `"test@io"`, true},
	{"email: empty brackets", `{"format":"email"}`, `"a@[]"`, false},
	{"email: lowercase IPv6 tag", `{"format":"email"}`, `"a@[ipv6:::1]"`, true},
	{"email: parenthesis comment", `{"format":"email"}`, `"test(comment)@iana.org"`, false},
	// optional/format/uri.json
	{"uri: URL with anchor", `{"format":"uri"}`, `"http://foo.bar/?baz=qux#quux"`, true},
	{"uri: ignores non-strings", `{"format":"uri"}`, `null`, true},
	{"uri: URL with parentheses", `{"format":"uri"}`, `"http://foo.com/blah_(wikipedia)_blah#cite-1"`, true},
	{"uri: many special characters", `{"format":"uri"}`, `"http://-.~_!$&'()*+,;=:%40:80%2f::::::@example.com"`, true},
	{"uri: IPv6 host", `{"format":"uri"}`, `"ldap://[2001:db8::7]/c=GB?objectClass?one"`, true},
	{"uri: mailto", `{"format":"uri"}`, `"mailto:John.Doe@example.com"`, true},
	{"uri: tel", `{"format":"uri"}`, `"tel:+1-816-555-1212"`, true},
	{"uri: URN", `{"format":"uri"}`, `"urn:oasis:names:specification:docbook:dtd:xml:4.1.2"`, true},
	{"uri: protocol-relative reference", `{"format":"uri"}`, `"//foo.bar/?baz=qux#quux"`, false},
	{"uri: relative reference", `{"format":"uri"}`, `"/abc"`, false},
	{"uri: windows path", `{"format":"uri"}`, `"\\\\WINDOWS\\fileshare"`, false},
	{"uri: no scheme", `{"format":"uri"}`, `"abc"`, false},
	{"uri: spaces", `{"format":"uri"}`, `"http:// shouldfail.com"`, false},
	{"uri: comma in scheme", `{"format":"uri"}`, `"bar,baz:foo"`, false},
	{"uri: invalid userinfo", `{"format":"uri"}`, `"https://[@example.org/test.txt"`, false},
	{"uri: non-ASCII", `{"format":"uri"}`, `"https://example.org/foobar®.txt"`, false},
	{"uri: bad percent-encoding", `{"format":"uri"}`, `"http://example.com/%6G"`, false},
	{"uri: non-numeric port", `{"format":"uri"}`, `"http://example.com:abc/path"`, false},
	{"uri: empty port", `{"format":"uri"}`, `"http://a.com:"`, true},
	{"uri: empty host with port", `{"format":"uri"}`, `"http://:80"`, true},
	// optional/format/date-time.json
	{"date-time: valid", `{"format":"date-time"}`, `"1963-06-19T08:30:06.283185Z"`, true},
	{"date-time: ignores non-strings", `{"format":"date-time"}`, `13.7`, true},
	{"date-time: no fraction", `{"format":"date-time"}`, `"1963-06-19T08:30:06Z"`, true},
	{"date-time: plus offset", `{"format":"date-time"}`, `"1937-01-01T12:00:27.87+00:20"`, true},
	{"date-time: minus offset", `{"format":"date-time"}`, `"1990-12-31T15:59:50.123-08:00"`, true},
	{"date-time: leap second UTC", `{"format":"date-time"}`, `"1998-12-31T23:59:60Z"`, true},
	{"date-time: leap second with offset", `{"format":"date-time"}`, `"1998-12-31T15:59:60.123-08:00"`, true},
	{"date-time: past leap second", `{"format":"date-time"}`, `"1998-12-31T23:59:61Z"`, false},
	{"date-time: leap second wrong minute", `{"format":"date-time"}`, `"1998-12-31T23:58:60Z"`, false},
	{"date-time: invalid day", `{"format":"date-time"}`, `"1990-02-31T15:59:59.123-08:00"`, false},
	{"date-time: invalid offset", `{"format":"date-time"}`, `"1990-12-31T15:59:59-24:00"`, false},
	{"date-time: Z after offset", `{"format":"date-time"}`, `"1963-06-19T08:30:06.28123+01:00Z"`, false},
	{"date-time: hour 24", `{"format":"date-time"}`, `"1990-12-31T24:00:00Z"`, false},
	{"date-time: not RFC 3339", `{"format":"date-time"}`, `"06/19/1963 08:30:06 PST"`, false},
	{"date-time: lowercase t and z", `{"format":"date-time"}`, `"1963-06-19t08:30:06.283185z"`, true},
	{"date-time: Bengali digit", `{"format":"date-time"}`, `"1963-06-1৪T00:00:00Z"`, false},
	// optional/format/date.json
	{"date: valid", `{"format":"date"}`, `"1963-06-19"`, true},
	{"date: ignores non-strings", `{"format":"date"}`, `{}`, true},
	{"date: 32 days in January", `{"format":"date"}`, `"2020-01-32"`, false},
	{"date: 30 days in February", `{"format":"date"}`, `"2020-02-30"`, false},
	{"date: 31 days in April", `{"format":"date"}`, `"2020-04-31"`, false},
	{"date: 2021 is not a leap year", `{"format":"date"}`, `"2021-02-29"`, false},
	{"date: 2020 is a leap year", `{"format":"date"}`, `"2020-02-29"`, true},
	{"date: 0100 is not a leap year", `{"format":"date"}`, `"0100-02-29"`, false},
	{"date: 0400 is a leap year", `{"format":"date"}`, `"0400-02-29"`, true},
	{"date: slashes", `{"format":"date"}`, `"06/19/1963"`, false},
	{"date: non-padded month", `{"format":"date"}`, `"1998-1-20"`, false},
	{"date: month 13", `{"format":"date"}`, `"1998-13-01"`, false},
	{"date: a date-time", `{"format":"date"}`, `"2020-11-28T23:55:45Z"`, false},
	{"date: week form", `{"format":"date"}`, `"2023-W01"`, false},
	// optional/format/uuid.json
	{"uuid: upper-case", `{"format":"uuid"}`, `"2EB8AA08-AA98-11EA-B4AA-73B441D16380"`, true},
	{"uuid: ignores non-strings", `{"format":"uuid"}`, `[]`, true},
	{"uuid: lower-case", `{"format":"uuid"}`, `"2eb8aa08-aa98-11ea-b4aa-73b441d16380"`, true},
	{"uuid: all zeroes", `{"format":"uuid"}`, `"00000000-0000-0000-0000-000000000000"`, true},
	{"uuid: wrong length", `{"format":"uuid"}`, `"2eb8aa08-aa98-11ea-b4aa-73b441d1638"`, false},
	{"uuid: not hex", `{"format":"uuid"}`, `"2eb8aa08-aa98-11ea-b4ga-73b441d16380"`, false},
	{"uuid: no dashes", `{"format":"uuid"}`, `"2eb8aa08aa9811eab4aa73b441d16380"`, false},
	{"uuid: shifted dashes", `{"format":"uuid"}`, `"2eb8aa0-8aa98-11e-ab4aa7-3b441d16380"`, false},
	{"uuid: URN prefixed", `{"format":"uuid"}`, `"urn:uuid:2eb8aa08-aa98-11ea-b4aa-73b441d16380"`, false},
	{"unknown format is an annotation", `{"format":"hostname-ish"}`, `"anything at all"`, true},
	// draft-07 tuple form, accepted for schemas generated by older tools
	{"draft-07 items array: valid", `{"items":[{"type":"integer"},{"type":"string"}],"additionalItems":false}`, `[1,"a"]`, true},
	{"draft-07 items array: wrong type", `{"items":[{"type":"integer"},{"type":"string"}],"additionalItems":false}`, `["a",1]`, false},
	{"draft-07 items array: additional item", `{"items":[{"type":"integer"},{"type":"string"}],"additionalItems":false}`, `[1,"a",true]`, false},
}

// TestSchemaSuite checks every suite fact.
func TestSchemaSuite(t *testing.T) {
	for _, tt := range schemaSuiteCases {
		t.Run(tt.name, func(t *testing.T) {
			s, err := compileSchema([]byte(tt.schema))
			if err != nil {
				t.Fatalf("compileSchema(%s): %v", tt.schema, err)
			}
			got, err := s.validateJSON([]byte(tt.instance))
			if err != nil {
				t.Fatalf("validateJSON(%s): %v", tt.instance, err)
			}
			if valid := len(got) == 0; valid != tt.valid {
				t.Errorf("schema %s, instance %s: valid = %v (%v); want %v", tt.schema, tt.instance, valid, got, tt.valid)
			}
		})
	}
}

// TestSchemaViolationPaths checks the JSON pointers and messages reported.
func TestSchemaViolationPaths(t *testing.T) {
	tests := []struct {
		name     string
		schema   string
		instance string
		want     []schemaViolation
	}{
		{
			name:     "root",
			schema:   `{"type":"object"}`,
			instance: `[]`,
			want:     []schemaViolation{{"", "must be object, got array"}},
		},
		{
			name:     "nested object and array",
			schema:   `{"properties":{"a":{"properties":{"b":{"items":{"type":"string"}}}}}}`,
			instance: `{"a":{"b":["x",1,"y",2.5]}}`,
			want:     []schemaViolation{{"/a/b/1", "must be string, got integer"}, {"/a/b/3", "must be string, got number"}},
		},
		{
			name:     "escaping of ~ and /",
			schema:   `{"properties":{"a/b":{"type":"integer"},"m~n":{"type":"integer"},"~1":{"type":"integer"}}}`,
			instance: `{"a/b":"x","m~n":"y","~1":"z"}`,
			want:     []schemaViolation{{"/a~1b", "must be integer, got string"}, {"/m~0n", "must be integer, got string"}, {"/~01", "must be integer, got string"}},
		},
		{
			name:     "required at the object, sorted members",
			schema:   `{"type":"object","required":["email","name"],"properties":{"age":{"minimum":0},"zip":{"pattern":"^[0-9]{5}$"}}}`,
			instance: `{"zip":"abc","age":-1}`,
			want: []schemaViolation{
				{"", `missing required property "email"`},
				{"", `missing required property "name"`},
				{"/age", "must be >= 0"},
				{"/zip", `must match pattern "^[0-9]{5}$"`},
			},
		},
		{
			name:     "additional property and item",
			schema:   `{"properties":{"list":{"prefixItems":[{"type":"integer"}],"items":false}},"additionalProperties":false}`,
			instance: `{"list":[1,2],"extra":true}`,
			want:     []schemaViolation{{"/extra", "property is not allowed"}, {"/list/1", "item is not allowed"}},
		},
		{
			name:     "ref into defs keeps the instance path",
			schema:   `{"$defs":{"email":{"type":"string","format":"email"}},"properties":{"to":{"items":{"$ref":"#/$defs/email"}}}}`,
			instance: `{"to":["a@example.com","nope"]}`,
			want:     []schemaViolation{{"/to/1", "must be a valid email"}},
		},
		{
			name:     "combinators report at the instance",
			schema:   `{"properties":{"v":{"anyOf":[{"type":"string"},{"type":"null"}]},"w":{"oneOf":[{"minimum":0},{"maximum":10}]},"x":{"not":{"const":"no"}}}}`,
			instance: `{"v":1,"w":5,"x":"no"}`,
			want: []schemaViolation{
				{"/v", "must match at least one schema in anyOf"},
				{"/w", "must match exactly one schema in oneOf, matched more than one"},
				{"/x", "must not match the schema in not"},
			},
		},
		{
			name:     "enum, const, lengths, counts",
			schema:   `{"properties":{"e":{"enum":["a","b"]},"c":{"const":{"k":1}},"s":{"minLength":2},"l":{"maxItems":1,"uniqueItems":true},"o":{"maxProperties":0},"n":{"minLength":1},"m":{"maxLength":1},"p":{"minProperties":1},"q":{"minItems":2}}}`,
			instance: `{"e":"z","c":{"k":2},"s":"é","l":[1,1],"o":{"p":1},"n":"","m":"ab","p":{},"q":[]}`,
			want: []schemaViolation{
				{"/c", `must equal {"k":1}`},
				{"/e", `must be one of ["a","b"]`},
				{"/l", "must have at most 1 item"},
				{"/l", "items 0 and 1 must not be equal"},
				{"/m", "must be at most 1 character long"},
				{"/n", "must be at least 1 character long"},
				{"/o", "must have at most 0 properties"},
				{"/p", "must have at least 1 property"},
				{"/q", "must have at least 2 items"},
				{"/s", "must be at least 2 characters long"},
			},
		},
		{
			name:     "false schema",
			schema:   `{"properties":{"gone":false}}`,
			instance: `{"gone":1}`,
			want:     []schemaViolation{{"/gone", "no value is allowed here"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := compileSchema([]byte(tt.schema))
			if err != nil {
				t.Fatalf("compileSchema(%s): %v", tt.schema, err)
			}
			got, err := s.validateJSON([]byte(tt.instance))
			if err != nil {
				t.Fatalf("validateJSON(%s): %v", tt.instance, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("validate(%s) = %v; want %v", tt.instance, got, tt.want)
			}
		})
	}
}

// TestSchemaViolationLimit checks that a huge invalid input reports a
// bounded number of violations.
func TestSchemaViolationLimit(t *testing.T) {
	s, err := compileSchema([]byte(`{"items":{"type":"string"}}`))
	if err != nil {
		t.Fatal(err)
	}
	items := make([]any, 1000)
	for i := range items {
		items[i] = json.Number("1")
	}
	if got := s.validate(items); len(got) != schemaMaxViolations {
		t.Errorf("len(validate(1000 bad items)) = %d; want %d", len(got), schemaMaxViolations)
	}
}

// TestSchemaConcurrentValidate checks that one compiled schema serves many
// goroutines at once (run with -race).
func TestSchemaConcurrentValidate(t *testing.T) {
	s, err := compileSchema([]byte(`{"type":"object","properties":{"n":{"multipleOf":0.01,"maximum":1e3},"s":{"pattern":"^a","format":"email"},"u":{"uniqueItems":true,"items":{"enum":[1,2,3]}}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	instances := []string{`{"n":19.99,"s":"a@b.c","u":[1,2]}`, `{"n":1000.001,"s":"x","u":[1,1,4]}`, `{}`}
	want := make([][]schemaViolation, len(instances))
	for i, raw := range instances {
		if want[i], err = s.validateJSON([]byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(instances))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, raw := range instances {
				if got, _ := s.validateJSON([]byte(raw)); !reflect.DeepEqual(got, want[i]) {
					errs <- fmt.Sprintf("validate(%s) = %v; want %v", raw, got, want[i])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSchemaGoValues checks instances built in Go rather than decoded.
func TestSchemaGoValues(t *testing.T) {
	s, err := compileSchema([]byte(`{"type":"object","properties":{"n":{"type":"integer","maximum":10},"f":{"multipleOf":0.25}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		instance any
		valid    bool
	}{
		{"int", map[string]any{"n": 3}, true},
		{"int64 too big", map[string]any{"n": int64(11)}, false},
		{"float64 integral", map[string]any{"n": 4.0}, true},
		{"float64 fraction", map[string]any{"n": 4.5}, false},
		{"float64 multiple", map[string]any{"f": 0.75}, true},
		{"NaN is not JSON", map[string]any{"f": schemaNaN()}, false},
		{"struct is not JSON", map[string]any{"f": struct{}{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.validate(tt.instance)
			if valid := len(got) == 0; valid != tt.valid {
				t.Errorf("validate(%v) = %v; want valid %v", tt.instance, got, tt.valid)
			}
		})
	}
}

// schemaNaN returns a NaN without a package-level constant expression.
func schemaNaN() float64 {
	zero := 0.0
	return zero / zero
}

// TestSchemaEmptySchema checks that an absent schema accepts everything.
func TestSchemaEmptySchema(t *testing.T) {
	for _, raw := range []string{"", "  ", "null", "true", "{}"} {
		s, err := compileSchema([]byte(raw))
		if err != nil {
			t.Fatalf("compileSchema(%q): %v", raw, err)
		}
		if got := s.validate(map[string]any{"x": []any{nil}}); got != nil {
			t.Errorf("compileSchema(%q).validate = %v; want nil", raw, got)
		}
	}
}

// TestSchemaCompileErrors checks that bad schemas are errors naming the
// keyword's location.
func TestSchemaCompileErrors(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   string // substring of the error
	}{
		{"invalid JSON", `{"type":`, "decode json"},
		{"trailing data", `{} {}`, "unexpected data"},
		{"root is a number", `5`, `"#": a schema must be an object or a boolean`},
		{"root is an array", `[]`, `"#": a schema must be an object or a boolean`},
		{"unknown type name", `{"type":"strin"}`, `"#/type"`},
		{"type is a number", `{"type":5}`, `"#/type"`},
		{"duplicate type", `{"type":["string","string"]}`, `"#/type": type "string" is listed twice`},
		{"empty type array", `{"type":[]}`, `"#/type": must not be empty`},
		{"negative minLength", `{"properties":{"a":{"minLength":-1}}}`, `"#/properties/a/minLength": must be a non-negative integer`},
		{"fractional minItems", `{"minItems":1.5}`, `"#/minItems"`},
		{"string maximum", `{"maximum":"1"}`, `"#/maximum": must be a number`},
		{"zero multipleOf", `{"multipleOf":0}`, `"#/multipleOf": must be greater than 0`},
		{"negative multipleOf", `{"multipleOf":-2}`, `"#/multipleOf"`},
		{"bad pattern", `{"pattern":"("}`, `"#/pattern": invalid regular expression`},
		{"bad patternProperties key", `{"patternProperties":{"a(":{}}}`, `"#/patternProperties/a("`},
		{"format not a string", `{"format":1}`, `"#/format"`},
		{"uniqueItems not a boolean", `{"uniqueItems":"yes"}`, `"#/uniqueItems"`},
		{"required not an array", `{"required":"a"}`, `"#/required"`},
		{"required with a number", `{"required":["a",1]}`, `"#/required"`},
		{"enum not an array", `{"enum":5}`, `"#/enum"`},
		{"empty allOf", `{"allOf":[]}`, `"#/allOf": must be a non-empty array`},
		{"anyOf member not a schema", `{"anyOf":[{},3]}`, `"#/anyOf/1"`},
		{"items not a schema", `{"items":5}`, `"#/items"`},
		{"property not a schema", `{"properties":{"a/b":5}}`, `"#/properties/a~1b"`},
		{"properties not an object", `{"properties":[]}`, `"#/properties"`},
		{"bad schema in defs", `{"$defs":{"x":{"type":"nope"}}}`, `"#/$defs/x/type"`},
		{"ref not a string", `{"$ref":1}`, `"#/$ref"`},
		{"unresolvable ref", `{"$ref":"#/$defs/missing"}`, `"#/$ref": unresolvable $ref`},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, `only local references`},
		{"anchor ref", `{"$ref":"#node"}`, `anchors are not supported`},
		{"ref through a scalar", `{"const":{"a":1},"$ref":"#/const/a/b"}`, `"#/$ref": unresolvable $ref`},
		{"ref to a non-schema", `{"$defs":{"a":1},"$ref":"#/$defs/a"}`, `"#/$defs/a": a schema must be`},
		{"self ref", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `"#/$defs/a": schema refers to itself`},
		{"root self ref", `{"$ref":"#"}`, `"#": schema refers to itself`},
		{"ref cycle through applicators", `{"$defs":{"a":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/b"}]},"b":{"not":{"$ref":"#/$defs/a"}}}}`, "schema refers to itself"},
		{"items array with prefixItems", `{"items":[{}],"prefixItems":[{}]}`, `"#/items"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileSchema([]byte(tt.schema))
			if err == nil {
				t.Fatalf("compileSchema(%s) = nil error; want one containing %q", tt.schema, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "compile schema: ") {
				t.Errorf("compileSchema(%s) error = %q; want it to contain %q", tt.schema, err, tt.want)
			}
		})
	}
}

// TestSchemaRecursionThroughInstance checks that a recursive schema that
// descends into the instance compiles and validates deep data.
func TestSchemaRecursionThroughInstance(t *testing.T) {
	s, err := compileSchema([]byte(`{"$ref":"#/$defs/list","$defs":{"list":{"type":"object","required":["v"],"properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/list"}},"additionalProperties":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	const depth = 500
	for range depth {
		b.WriteString(`{"v":1,"next":`)
	}
	b.WriteString(`{"v":"x"}`)
	b.WriteString(strings.Repeat("}", depth))
	got, err := s.validateJSON([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("/next", depth) + "/v"
	if len(got) != 1 || got[0].Path != want {
		t.Errorf("validate(deep list) = %v; want one violation at %s", got, want)
	}
}

// schemaFanOutSchema returns a schema whose $defs chain d0 → d1 → … → dn
// references the next level twice through the given combinator, so naive
// evaluation costs 2^n.
func schemaFanOutSchema(n int, combinator string) string {
	var defs []string
	for i := range n {
		defs = append(defs, fmt.Sprintf(`"d%d":{%q:[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, combinator, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"string"}`, n))
	return `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`
}

// TestSchemaEvaluationBudget checks that a fanning-out $ref graph is
// refused with a violation instead of running for 2^40 steps.
func TestSchemaEvaluationBudget(t *testing.T) {
	s, err := compileSchema([]byte(schemaFanOutSchema(40, "allOf")))
	if err != nil {
		t.Fatal(err)
	}
	want := []schemaViolation{{"", "schema is too complex to evaluate against this value"}}
	if got := s.validate("x"); !reflect.DeepEqual(got, want) {
		t.Errorf("validate(%q) = %v; want %v", "x", got, want)
	}
	small, err := compileSchema([]byte(schemaFanOutSchema(8, "allOf")))
	if err != nil {
		t.Fatal(err)
	}
	if got := small.validate("x"); got != nil {
		t.Errorf("validate(%q) against depth 8 = %v; want nil", "x", got)
	}
}

// TestDecodeJSONValue checks the decoding the validator expects.
func TestDecodeJSONValue(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    any
		wantErr bool
	}{
		{"big integer stays exact", `12345678901234567890123`, json.Number("12345678901234567890123"), false},
		{"object", `{"a":[1,null]}`, map[string]any{"a": []any{json.Number("1"), nil}}, false},
		{"surrounding space", " true \n", true, false},
		{"empty", ``, nil, true},
		{"trailing data", `1 2`, nil, true},
		{"invalid", `{"a"}`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeJSONValue([]byte(tt.raw))
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeJSONValue(%q) error = %v; want error %v", tt.raw, err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decodeJSONValue(%q) = %#v; want %#v", tt.raw, got, tt.want)
			}
		})
	}
	s, _ := compileSchema([]byte(`{}`))
	if _, err := s.validateJSON([]byte(`{`)); err == nil {
		t.Errorf("validateJSON(%q) = nil error; want one", `{`)
	}
}

// TestSchemaDecimal checks exact number comparison and divisibility.
func TestSchemaDecimal(t *testing.T) {
	tests := []struct {
		a, b     string
		cmp      int
		multiple bool // a multipleOf b (b > 0)
	}{
		{"0.0075", "0.0001", 1, true},
		{"0.00751", "0.0001", 1, false},
		{"1e308", "0.5", 1, true},
		{"-0", "0", 0, true},
		{"1.10", "1.1", 0, true},
		{"100", "1e2", 0, true},
		{"-3", "1.5", -1, true},
		{"9007199254740993", "9007199254740992", 1, false},
		{"1e-400", "1e400", -1, false},
		{"1e1000000000000", "7", 1, false},
		{"3e1000000000000", "3", 1, true},
		{"0.3", "0.1", 1, true},
		{"19.99", "0.01", 1, true},
	}
	for _, tt := range tests {
		a, ok1 := parseSchemaDecimal(tt.a)
		b, ok2 := parseSchemaDecimal(tt.b)
		if !ok1 || !ok2 {
			t.Fatalf("parseSchemaDecimal(%q, %q) failed", tt.a, tt.b)
		}
		if got := a.cmp(b); got != tt.cmp {
			t.Errorf("cmp(%s, %s) = %d; want %d", tt.a, tt.b, got, tt.cmp)
		}
		if got := b.cmp(a); got != -tt.cmp {
			t.Errorf("cmp(%s, %s) = %d; want %d", tt.b, tt.a, got, -tt.cmp)
		}
		if got := a.isMultipleOf(b); got != tt.multiple {
			t.Errorf("%s multipleOf %s = %v; want %v", tt.a, tt.b, got, tt.multiple)
		}
	}
	for _, bad := range []string{"", "-", "1.", ".5", "01x", "1e", "1e+", "+1", "0x10"} {
		if _, ok := parseSchemaDecimal(bad); ok {
			t.Errorf("parseSchemaDecimal(%q) ok; want failure", bad)
		}
	}
}

// FuzzSchemaValidate compiles arbitrary schemas and validates arbitrary
// instances: nothing may panic, a bad schema must be an error, and
// validation (and type generation) must be deterministic.
func FuzzSchemaValidate(f *testing.F) {
	for _, tt := range schemaSuiteCases {
		f.Add(tt.schema, tt.instance)
	}
	f.Add(`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, `{}`)
	f.Add(`{"multipleOf":1e-400,"minimum":-1e400}`, `1e400`)
	f.Add(schemaFanOutSchema(6, "oneOf"), `"x"`)
	f.Add(`{"properties":{"~/":{"$ref":"#/properties/~0~1"}}}`, `{"~/":1}`)
	f.Fuzz(func(t *testing.T, schema, instance string) {
		s, err := compileSchema([]byte(schema))
		if err != nil {
			if s != nil {
				t.Fatalf("compileSchema(%q) returned a schema with error %v", schema, err)
			}
			return
		}
		ts1, err1 := schemaToTSDecls("Input", []byte(schema))
		ts2, err2 := schemaToTSDecls("Input", []byte(schema))
		if err1 != nil || err2 != nil || ts1 != ts2 {
			t.Fatalf("schemaToTSDecls(%q) not deterministic or failed: %v, %v", schema, err1, err2)
		}
		expr1, err1 := schemaToTS([]byte(schema))
		expr2, err2 := schemaToTS([]byte(schema))
		if err1 != nil || err2 != nil || expr1 != expr2 {
			t.Fatalf("schemaToTS(%q) not deterministic or failed: %v, %v", schema, err1, err2)
		}
		inst, err := decodeJSONValue([]byte(instance))
		if err != nil {
			return
		}
		first := s.validate(inst)
		second := s.validate(inst)
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("validate not deterministic: %v then %v", first, second)
		}
		if len(first) > schemaMaxViolations {
			t.Fatalf("validate returned %d violations; limit %d", len(first), schemaMaxViolations)
		}
	})
}
