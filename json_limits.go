package main

// The limits on JSON values that the runtime accepts and journals. A value
// accepted at the edge must replay forever: the start route, hook resumes,
// the chat wires and the settings route check a body against edgeJSON before
// anything is written; the engine checks every record it writes, and every
// record it replays, against journalJSON, whose depth allows for the
// envelope a record wraps around a value; values made by user code (step
// results, workflow outputs) are checked against codeJSON before they are
// journaled, so an oversized one fails its step instead of the journal.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

const (
	// jsonMaxDepth is the deepest nesting of arrays and objects a value may
	// have. Go's decoder stops at 10,000 and a snapshot nests a value a few
	// levels deeper than the request that brought it, so the limit sits far
	// below that; real inputs rarely pass 20.
	jsonMaxDepth = 128
	// journalEnvelopeDepth is how deep a journal record nests the values it
	// carries (an agent turn: record → calls → call → result).
	journalEnvelopeDepth = 4
	// jsonMaxCodeValue is the largest step result or workflow output, in
	// bytes of compact JSON.
	jsonMaxCodeValue = 8 << 20
	// journalMaxRecord is the largest record the engine writes or replays.
	journalMaxRecord = 64 << 20
)

// jsonLimits is one set of limits on a JSON document.
type jsonLimits struct {
	maxDepth  int
	maxBytes  int  // 0: no size limit here (the caller bounds the read)
	rejectNUL bool // refuse "\u0000" in strings: PostgreSQL text and jsonb cannot hold it
}

var (
	// edgeJSON bounds what a remote caller may send (the body size is
	// bounded by maxRequestBody when it is read).
	edgeJSON = jsonLimits{maxDepth: jsonMaxDepth, rejectNUL: true}
	// codeJSON bounds values made by user code before they are journaled.
	codeJSON = jsonLimits{maxDepth: jsonMaxDepth, maxBytes: jsonMaxCodeValue}
	// journalJSON bounds every journal record, written and replayed.
	journalJSON = jsonLimits{maxDepth: jsonMaxDepth + journalEnvelopeDepth, maxBytes: journalMaxRecord}
)

// jsonLimitError is a document outside the limits: Offset is the byte where
// the problem starts.
type jsonLimitError struct {
	Offset int
	Reason string
}

// Error describes the problem and where it is.
func (e *jsonLimitError) Error() string {
	return fmt.Sprintf("%s (at byte %d)", e.Reason, e.Offset)
}

// check returns a *jsonLimitError unless b is exactly one JSON value within
// l: well-formed, valid UTF-8, nested at most maxDepth deep, every number
// finite as a float64, no larger than maxBytes.
func (l jsonLimits) check(b []byte) error {
	if l.maxBytes > 0 && len(b) > l.maxBytes {
		return &jsonLimitError{Offset: l.maxBytes, Reason: fmt.Sprintf("value larger than %d bytes", l.maxBytes)}
	}
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return &jsonLimitError{Offset: off, Reason: "invalid UTF-8"}
	}
	// A scan that trusts nothing: brackets outside strings give the depth,
	// number tokens are parsed. Syntax is checked after, by the standard
	// decoder's validator, which has its own (much higher) depth limit.
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					if l.rejectNUL && i+5 < len(b) && string(b[i+1:i+6]) == "u0000" {
						return &jsonLimitError{Offset: i, Reason: `string contains \u0000, which PostgreSQL cannot store`}
					}
					i++
				}
			}
		case c == '[' || c == '{':
			if depth++; depth > l.maxDepth {
				return &jsonLimitError{Offset: i, Reason: fmt.Sprintf("nested deeper than %d levels", l.maxDepth)}
			}
		case c == ']' || c == '}':
			depth--
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(b) && isJSONNumberByte(b[j]) {
				j++
			}
			if f, err := strconv.ParseFloat(string(b[i:j]), 64); err != nil && math.IsInf(f, 0) {
				return &jsonLimitError{Offset: i, Reason: fmt.Sprintf("number %.40s is out of the range of a 64-bit float", b[i:j])}
			}
			i = j - 1
		}
	}
	if !json.Valid(b) {
		e := &jsonLimitError{Reason: "not valid JSON"}
		var se *json.SyntaxError
		if errors.As(json.Unmarshal(b, new(json.RawMessage)), &se) {
			e.Offset, e.Reason = int(se.Offset), "not valid JSON: "+se.Error()
		}
		return e
	}
	return nil
}

// isJSONNumberByte reports whether c may continue a JSON number token.
func isJSONNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}
