package main

// schema_format.go: the string formats schema.go asserts (email, uri,
// date-time, date, uuid); any other format name is an annotation.

import (
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"
)

// schemaFormatValid checks the asserted formats; any other format name is an
// annotation and always passes.
func schemaFormatValid(format, s string) bool {
	switch format {
	case "email":
		return schemaIsEmail(s)
	case "uri":
		return schemaIsURI(s)
	case "date-time":
		return schemaIsDateTime(s)
	case "date":
		return schemaIsDate(s)
	case "uuid":
		return schemaIsUUID(s)
	}
	return true
}

// schemaIsEmail checks an RFC 5321 mailbox: a dot-atom or quoted local part,
// "@", and a hostname or a bracketed IPv4 / "IPv6:" address literal.
func schemaIsEmail(s string) bool {
	var at int
	if strings.HasPrefix(s, `"`) {
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
			if i >= len(s) || s[i] < 0x20 || s[i] > 0x7e {
				return false
			}
		}
		at = i + 1
	} else {
		at = strings.IndexByte(s, '@')
		if at < 0 {
			return false
		}
		for atom := range strings.SplitSeq(s[:at], ".") {
			if atom == "" || strings.IndexFunc(atom, func(r rune) bool { return !schemaIsAtext(r) }) >= 0 {
				return false
			}
		}
	}
	if at >= len(s) || s[at] != '@' || at > 64 {
		return false
	}
	domain := s[at+1:]
	if lit, ok := strings.CutPrefix(domain, "["); ok {
		lit, ok = strings.CutSuffix(lit, "]")
		if !ok {
			return false
		}
		if len(lit) > 5 && strings.EqualFold(lit[:5], "IPv6:") {
			a, err := netip.ParseAddr(lit[5:])
			return err == nil && a.Is6() && a.Zone() == ""
		}
		a, err := netip.ParseAddr(lit)
		return err == nil && a.Is4()
	}
	return schemaIsHostname(domain)
}

// schemaIsAtext reports whether r may appear in an unquoted local part.
func schemaIsAtext(r rune) bool {
	return r < utf8.RuneSelf && (schemaIsAlnum(byte(r)) || strings.ContainsRune("!#$%&'*+-/=?^_`{|}~", r))
}

// schemaIsAlnum reports whether c is an ASCII letter or digit.
func schemaIsAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// schemaIsHostname checks an ASCII DNS name: dot-separated labels of 1-63
// letters, digits and inner hyphens, 253 bytes at most.
func schemaIsHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if !schemaIsAlnum(label[i]) && label[i] != '-' {
				return false
			}
		}
	}
	return true
}

// schemaIsURI checks an absolute URI (RFC 3986 "URI": scheme, hier-part,
// optional query and fragment); relative references are not URIs.
func schemaIsURI(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon <= 0 || !schemaIsScheme(s[:colon]) {
		return false
	}
	rest := s[colon+1:]
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		if !schemaURIChars(rest[i+1:], "/?") {
			return false
		}
		rest = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		if !schemaURIChars(rest[i+1:], "/?") {
			return false
		}
		rest = rest[:i]
	}
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		auth, path := after, ""
		if i := strings.IndexByte(after, '/'); i >= 0 {
			auth, path = after[:i], after[i:]
		}
		return schemaIsAuthority(auth) && schemaURIChars(path, "/")
	}
	return schemaURIChars(rest, "/")
}

// schemaIsScheme checks ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func schemaIsScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if i == 0 && !letter || !schemaIsAlnum(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return s != ""
}

// schemaURIChars reports whether s consists of pchar (unreserved,
// percent-encoded, sub-delims, ":" and "@") and the bytes in extra.
func schemaURIChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !schemaIsHex(s[i+1]) || !schemaIsHex(s[i+2]) {
				return false
			}
			i += 2
		case c >= utf8.RuneSelf:
			return false
		case schemaIsAlnum(c), strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0, strings.IndexByte(extra, c) >= 0:
		default:
			return false
		}
	}
	return true
}

// schemaIsHex reports whether c is a hexadecimal digit.
func schemaIsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// schemaIsAuthority checks [ userinfo "@" ] host [ ":" port ].
func schemaIsAuthority(auth string) bool {
	if i := strings.IndexByte(auth, '@'); i >= 0 {
		if !schemaURIChars(auth[:i], "") {
			return false
		}
		auth = auth[i+1:]
	}
	host, port := auth, ""
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 || !schemaIsIPLiteral(auth[1:end]) {
			return false
		}
		host, port = "", auth[end+1:]
		if port != "" && port[0] != ':' {
			return false
		}
	} else if i := strings.IndexByte(auth, ':'); i >= 0 {
		host, port = auth[:i], auth[i:]
	}
	if strings.Contains(host, "@") || !schemaURIChars(host, "") {
		return false
	}
	for i := 1; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// schemaIsIPLiteral checks the inside of "[...]": an IPv6 address or IPvFuture.
func schemaIsIPLiteral(s string) bool {
	if len(s) > 0 && (s[0] == 'v' || s[0] == 'V') {
		ver, rest, ok := strings.Cut(s[1:], ".")
		if !ok || ver == "" || rest == "" || strings.IndexFunc(ver, func(r rune) bool { return r >= utf8.RuneSelf || !schemaIsHex(byte(r)) }) >= 0 {
			return false
		}
		return !strings.ContainsAny(rest, "%@") && schemaURIChars(rest, "")
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6() && a.Zone() == ""
}

// schemaIsDate checks an RFC 3339 full-date: YYYY-MM-DD with a real day.
func schemaIsDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	y, ok1 := schemaDigits(s[0:4])
	m, ok2 := schemaDigits(s[5:7])
	d, ok3 := schemaDigits(s[8:10])
	if !ok1 || !ok2 || !ok3 || m < 1 || m > 12 || d < 1 {
		return false
	}
	// Day 0 of the next month is the last day of this one.
	return d <= time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// schemaIsDateTime checks an RFC 3339 date-time: full-date "T" time with
// optional fraction and a "Z" or ±hh:mm offset; a leap second (:60) is
// accepted only at 23:59 UTC.
func schemaIsDateTime(s string) bool {
	if len(s) < 20 || !schemaIsDate(s[:10]) || (s[10] != 'T' && s[10] != 't') {
		return false
	}
	t := s[11:]
	if len(t) < 9 || t[2] != ':' || t[5] != ':' {
		return false
	}
	hh, ok1 := schemaDigits(t[0:2])
	mm, ok2 := schemaDigits(t[3:5])
	ss, ok3 := schemaDigits(t[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 {
		return false
	}
	t = t[8:]
	if strings.HasPrefix(t, ".") {
		n := 1
		for n < len(t) && '0' <= t[n] && t[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		t = t[n:]
	}
	offset := 0
	switch {
	case t == "Z" || t == "z":
	case len(t) == 6 && (t[0] == '+' || t[0] == '-') && t[3] == ':':
		oh, ok1 := schemaDigits(t[1:3])
		om, ok2 := schemaDigits(t[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return false
		}
		offset = oh*60 + om
		if t[0] == '-' {
			offset = -offset
		}
	default:
		return false
	}
	if ss == 60 {
		utc := ((hh*60+mm-offset)%1440 + 1440) % 1440
		return utc == 23*60+59
	}
	return true
}

// schemaDigits parses a string of ASCII digits.
func schemaDigits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, s != ""
}

// schemaIsUUID checks the 8-4-4-4-12 hexadecimal form, any version.
func schemaIsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if !schemaIsHex(s[i]) {
			return false
		}
	}
	return true
}

// schemaObject is a JSON object that remembers its member order, as schema
