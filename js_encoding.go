package main

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// utf8Decoder is the WHATWG Encoding standard's UTF-8 decoder with its
// state kept between stream: true calls of one TextDecoder: invalid input
// becomes U+FFFD per maximal subpart (or an error when fatal), a leading
// BOM is dropped unless ignoreBOM.
type utf8Decoder struct {
	fatal, ignoreBOM bool
	needed, seen     int
	cp               rune
	lower, upper     byte
	bomDone          bool // the start of the stream is behind us
}

// reset makes d ready for a new stream.
func (d *utf8Decoder) reset() {
	d.needed, d.seen, d.cp, d.lower, d.upper, d.bomDone = 0, 0, 0, 0x80, 0xBF, false
}

// decode decodes in; when stream is false it ends the stream (an
// incomplete sequence is an error) and resets d. ok is false on invalid
// input when d is fatal.
func (d *utf8Decoder) decode(in []byte, stream bool) (out string, ok bool) {
	var b strings.Builder
	b.Grow(len(in))
	bad := false
	emitErr := func() {
		bad = true
		b.WriteRune(utf8.RuneError)
	}
	for i := 0; i < len(in); i++ {
		c := in[i]
		if d.needed == 0 {
			switch {
			case c <= 0x7F:
				b.WriteByte(c)
			case c >= 0xC2 && c <= 0xDF:
				d.needed, d.cp = 1, rune(c&0x1F)
			case c >= 0xE0 && c <= 0xEF:
				if c == 0xE0 {
					d.lower = 0xA0
				} else if c == 0xED {
					d.upper = 0x9F
				}
				d.needed, d.cp = 2, rune(c&0xF)
			case c >= 0xF0 && c <= 0xF4:
				if c == 0xF0 {
					d.lower = 0x90
				} else if c == 0xF4 {
					d.upper = 0x8F
				}
				d.needed, d.cp = 3, rune(c&0x7)
			default:
				emitErr()
			}
			continue
		}
		if c < d.lower || c > d.upper {
			d.needed, d.seen, d.cp, d.lower, d.upper = 0, 0, 0, 0x80, 0xBF
			emitErr()
			i-- // the byte starts over
			continue
		}
		d.lower, d.upper = 0x80, 0xBF
		d.cp = d.cp<<6 | rune(c&0x3F)
		if d.seen++; d.seen == d.needed {
			b.WriteRune(d.cp)
			d.needed, d.seen, d.cp = 0, 0, 0
		}
	}
	if !stream && d.needed != 0 {
		emitErr()
	}
	out = b.String()
	if !d.bomDone && out != "" {
		d.bomDone = true
		if !d.ignoreBOM {
			out = strings.TrimPrefix(out, "\uFEFF")
		}
	}
	if !stream {
		d.reset()
	}
	return out, !bad || !d.fatal
}

// encodingNatives are the Go halves of TextEncoder, TextDecoder, atob and
// btoa (js/web.js wraps them and throws the web's error types).
func encodingNatives(vm *goja.Runtime, n *goja.Object) {
	n.Set("utf8Decoder", func(fatal, ignoreBOM bool) goja.Value {
		d := &utf8Decoder{fatal: fatal, ignoreBOM: ignoreBOM}
		d.reset()
		return vm.ToValue(func(input goja.Value, stream bool) goja.Value {
			var in []byte
			if !goja.IsUndefined(input) {
				b, ok := jsBytesView(input)
				if !ok {
					panic(vm.NewTypeError("TextDecoder.decode: input must be an ArrayBuffer, a typed array or a DataView"))
				}
				in = b
			}
			s, ok := d.decode(in, stream)
			if !ok {
				d.reset()
				panic(vm.NewTypeError("TextDecoder.decode: the encoded data is not valid UTF-8"))
			}
			return vm.ToValue(s)
		})
	})
	n.Set("utf8Encode", func(s string) goja.Value { return jsUint8Array(vm, []byte(s)) })
	n.Set("utf8EncodeInto", func(s string, dest goja.Value) goja.Value {
		dst, ok := jsBytesView(dest)
		if !ok {
			panic(vm.NewTypeError("TextEncoder.encodeInto: destination must be a Uint8Array"))
		}
		read, written := 0, 0
		for _, r := range s {
			n := utf8.RuneLen(r)
			if written+n > len(dst) {
				break
			}
			utf8.EncodeRune(dst[written:], r)
			written += n
			if read++; r >= 0x10000 {
				read++ // a surrogate pair in UTF-16
			}
		}
		return vm.ToValue(map[string]int{"read": read, "written": written})
	})
	n.Set("atob", func(s string) goja.Value {
		b, ok := forgivingBase64Decode(s)
		if !ok {
			return goja.Null()
		}
		return vm.ToValue(latin1String(b))
	})
	n.Set("btoa", func(s string) goja.Value {
		b := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 0xFF {
				return goja.Null()
			}
			b = append(b, byte(r))
		}
		return vm.ToValue(base64.StdEncoding.EncodeToString(b))
	})
}

// forgivingBase64Decode is the HTML standard's forgiving-base64 decode:
// ASCII whitespace is ignored, padding is optional, anything else invalid.
func forgivingBase64Decode(s string) ([]byte, bool) {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\f' || r == '\r' {
			return -1
		}
		return r
	}, s)
	if len(s)%4 == 0 {
		s = strings.TrimSuffix(s, "=")
		s = strings.TrimSuffix(s, "=")
	}
	if len(s)%4 == 1 || strings.ContainsRune(s, '=') {
		return nil, false
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	return b, err == nil
}

// latin1String returns the string whose code units are the bytes of b.
func latin1String(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}
