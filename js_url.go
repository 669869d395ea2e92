package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
	"golang.org/x/net/idna"
)

// urlRecord is a URL as the WHATWG URL standard models it; URL and
// URLSearchParams of the VMs (js/web_fetch.js) are views of one.
type urlRecord struct {
	scheme, username, password string
	host                       *string // serialized; nil when the URL has no host
	port                       int     // -1: none
	path                       []string
	opaque                     bool    // an opaque path: path[0] is all of it
	query, fragment            *string // nil: none
}

// urlSpecialPorts are the special schemes and their default ports (-1: none).
var urlSpecialPorts = map[string]int{"ftp": 21, "file": -1, "http": 80, "https": 443, "ws": 80, "wss": 443}

func (u *urlRecord) special() bool { _, ok := urlSpecialPorts[u.scheme]; return ok }

// Percent-encode sets of the URL standard, as predicates on a byte.
func urlC0(c byte) bool       { return c < 0x20 || c > 0x7E }
func urlFragment(c byte) bool { return urlC0(c) || strings.IndexByte(" \"<>`", c) >= 0 }
func urlQuery(c byte) bool    { return urlC0(c) || strings.IndexByte(" \"#<>", c) >= 0 }
func urlSpecialQuery(c byte) bool {
	return urlQuery(c) || c == '\''
}
func urlPath(c byte) bool     { return urlQuery(c) || strings.IndexByte("?^`{}", c) >= 0 }
func urlUserinfo(c byte) bool { return urlPath(c) || strings.IndexByte("/:;=@[\\]|", c) >= 0 }
func urlComponent(c byte) bool {
	return urlUserinfo(c) || strings.IndexByte("$%&+,", c) >= 0
}
func urlForm(c byte) bool { return urlComponent(c) || strings.IndexByte("!'()~", c) >= 0 }

// urlPercentEncode UTF-8 percent-encodes the bytes of s in set.
func urlPercentEncode(s string, set func(byte) bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; set(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// urlPercentDecode decodes %XX sequences; others stay as they are.
func urlPercentDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			out = append(out, byte(v))
			i += 2
			continue
		}
		out = append(out, s[i])
	}
	return out
}

func isHex(c byte) bool   { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
func isAlpha(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }
func isDigit(r rune) bool { return '0' <= r && r <= '9' }

// urlState is a state of the basic URL parser.
type urlState int

const (
	stSchemeStart urlState = iota
	stScheme
	stNoScheme
	stSpecialRelativeOrAuthority
	stPathOrAuthority
	stRelative
	stRelativeSlash
	stSpecialAuthoritySlashes
	stSpecialAuthorityIgnoreSlashes
	stAuthority
	stHost
	stHostname
	stPort
	stFile
	stFileSlash
	stFileHost
	stPathStart
	stPath
	stOpaquePath
	stQuery
	stFragment
)

// urlParse is the basic URL parser: it parses input against base (nil:
// none), or, with override set, changes url from state on (a setter). ok
// is false when input is not a valid URL (or the setter does not apply).
func urlParse(input string, base *urlRecord, url *urlRecord, override urlState, hasOverride bool) (*urlRecord, bool) {
	if url == nil {
		url = &urlRecord{port: -1}
		input = strings.TrimFunc(input, func(r rune) bool { return r <= 0x20 })
	}
	input = strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(input)
	state := stSchemeStart
	if hasOverride {
		state = override
	}
	in := []rune(input)
	var buf strings.Builder
	atSign, insideBrackets, passwordToken := false, false, false
	const eof = rune(-1)
	for p := 0; p <= len(in); p++ {
		c := eof
		if p < len(in) {
			c = in[p]
		}
		remaining := func(i int) rune {
			if p+i < len(in) {
				return in[p+i]
			}
			return eof
		}
		switch state {
		case stSchemeStart:
			if isAlpha(c) {
				buf.WriteRune(c | 0x20)
				state = stScheme
			} else if !hasOverride {
				state = stNoScheme
				p--
			} else {
				return nil, false
			}
		case stScheme:
			if isAlpha(c) || isDigit(c) || c == '+' || c == '-' || c == '.' {
				if 'A' <= c && c <= 'Z' {
					c |= 0x20
				}
				buf.WriteRune(c)
			} else if c == ':' {
				s := buf.String()
				if hasOverride {
					_, newSpecial := urlSpecialPorts[s]
					if url.special() != newSpecial || (url.username != "" || url.password != "" || url.port >= 0) && s == "file" ||
						url.scheme == "file" && url.host != nil && *url.host == "" {
						return url, true
					}
				}
				url.scheme = s
				if hasOverride {
					if url.port == urlSpecialPorts[s] && url.special() {
						url.port = -1
					}
					return url, true
				}
				buf.Reset()
				switch {
				case s == "file":
					state = stFile
				case url.special() && base != nil && base.scheme == s:
					state = stSpecialRelativeOrAuthority
				case url.special():
					state = stSpecialAuthoritySlashes
				case remaining(1) == '/':
					state = stPathOrAuthority
					p++
				default:
					url.path, url.opaque = []string{""}, true
					state = stOpaquePath
				}
			} else if !hasOverride {
				buf.Reset()
				state = stNoScheme
				p = -1
			} else {
				return nil, false
			}
		case stNoScheme:
			if base == nil || base.opaque && c != '#' {
				return nil, false
			} else if base.opaque && c == '#' {
				url.scheme, url.path, url.opaque, url.query = base.scheme, base.path, true, base.query
				empty := ""
				url.fragment = &empty
				state = stFragment
			} else if base.scheme != "file" {
				state = stRelative
				p--
			} else {
				state = stFile
				p--
			}
		case stSpecialRelativeOrAuthority:
			if c == '/' && remaining(1) == '/' {
				state = stSpecialAuthorityIgnoreSlashes
				p++
			} else {
				state = stRelative
				p--
			}
		case stPathOrAuthority:
			if c == '/' {
				state = stAuthority
			} else {
				state = stPath
				p--
			}
		case stRelative:
			url.scheme = base.scheme
			if c == '/' {
				state = stRelativeSlash
			} else if url.special() && c == '\\' {
				state = stRelativeSlash
			} else {
				url.username, url.password, url.host, url.port = base.username, base.password, base.host, base.port
				url.path, url.query = append([]string(nil), base.path...), base.query
				if c == '?' {
					empty := ""
					url.query = &empty
					state = stQuery
				} else if c == '#' {
					empty := ""
					url.fragment = &empty
					state = stFragment
				} else if c != eof {
					url.query = nil
					url.shortenPath()
					state = stPath
					p--
				}
			}
		case stRelativeSlash:
			if url.special() && (c == '/' || c == '\\') {
				state = stSpecialAuthorityIgnoreSlashes
			} else if c == '/' {
				state = stAuthority
			} else {
				url.username, url.password, url.host, url.port = base.username, base.password, base.host, base.port
				state = stPath
				p--
			}
		case stSpecialAuthoritySlashes:
			if c == '/' && remaining(1) == '/' {
				state = stSpecialAuthorityIgnoreSlashes
				p++
			} else {
				state = stSpecialAuthorityIgnoreSlashes
				p--
			}
		case stSpecialAuthorityIgnoreSlashes:
			if c != '/' && c != '\\' {
				state = stAuthority
				p--
			}
		case stAuthority:
			if c == '@' {
				if atSign {
					s := buf.String()
					buf.Reset()
					buf.WriteString("%40")
					buf.WriteString(s)
				}
				atSign = true
				for _, r := range buf.String() {
					if r == ':' && !passwordToken {
						passwordToken = true
						continue
					}
					e := urlPercentEncode(string(r), urlUserinfo)
					if passwordToken {
						url.password += e
					} else {
						url.username += e
					}
				}
				buf.Reset()
			} else if c == eof || c == '/' || c == '?' || c == '#' || url.special() && c == '\\' {
				if atSign && buf.Len() == 0 {
					return nil, false
				}
				p -= utf8.RuneCountInString(buf.String()) + 1
				buf.Reset()
				state = stHost
			} else {
				buf.WriteRune(c)
			}
		case stHost, stHostname:
			if hasOverride && url.scheme == "file" {
				p--
				state = stFileHost
			} else if c == ':' && !insideBrackets {
				if buf.Len() == 0 {
					return nil, false
				}
				if hasOverride && override == stHostname {
					return nil, false
				}
				h, ok := urlParseHost(buf.String(), !url.special())
				if !ok {
					return nil, false
				}
				url.host = &h
				buf.Reset()
				state = stPort
			} else if c == eof || c == '/' || c == '?' || c == '#' || url.special() && c == '\\' {
				p--
				if url.special() && buf.Len() == 0 {
					return nil, false
				} else if hasOverride && buf.Len() == 0 && (url.username != "" || url.password != "" || url.port >= 0) {
					return nil, false
				}
				h, ok := urlParseHost(buf.String(), !url.special())
				if !ok {
					return nil, false
				}
				url.host = &h
				buf.Reset()
				state = stPathStart
				if hasOverride {
					return url, true
				}
			} else {
				if c == '[' {
					insideBrackets = true
				} else if c == ']' {
					insideBrackets = false
				}
				buf.WriteRune(c)
			}
		case stPort:
			if isDigit(c) {
				buf.WriteRune(c)
			} else if c == eof || c == '/' || c == '?' || c == '#' || url.special() && c == '\\' || hasOverride {
				if buf.Len() != 0 {
					n, err := strconv.ParseUint(strings.TrimLeft(buf.String(), "0")+"0", 10, 32)
					n /= 10
					if err != nil || n > 65535 {
						return nil, false
					}
					if dp, ok := urlSpecialPorts[url.scheme]; ok && dp == int(n) {
						url.port = -1
					} else {
						url.port = int(n)
					}
					buf.Reset()
					if hasOverride {
						return url, true
					}
				}
				if hasOverride {
					return url, true
				}
				state = stPathStart
				p--
			} else {
				return nil, false
			}
		case stFile:
			url.scheme = "file"
			empty := ""
			url.host = &empty
			if c == '/' || c == '\\' {
				state = stFileSlash
			} else if base != nil && base.scheme == "file" {
				url.host, url.path, url.query = base.host, append([]string(nil), base.path...), base.query
				if c == '?' {
					url.query = &empty
					state = stQuery
				} else if c == '#' {
					url.fragment = &empty
					state = stFragment
				} else if c != eof {
					url.query = nil
					if !urlStartsWithDriveLetter(in[p:]) {
						url.shortenPath()
					} else {
						url.path = nil
					}
					state = stPath
					p--
				}
			} else {
				state = stPath
				p--
			}
		case stFileSlash:
			if c == '/' || c == '\\' {
				state = stFileHost
			} else {
				if base != nil && base.scheme == "file" {
					url.host = base.host
					if !urlStartsWithDriveLetter(in[p:]) && len(base.path) > 0 && urlNormalizedDriveLetter(base.path[0]) {
						url.path = append(url.path, base.path[0])
					}
				}
				state = stPath
				p--
			}
		case stFileHost:
			if c == eof || c == '/' || c == '\\' || c == '?' || c == '#' {
				p--
				s := buf.String()
				if !hasOverride && urlDriveLetter(s) {
					state = stPath
				} else if s == "" {
					empty := ""
					url.host = &empty
					if hasOverride {
						return url, true
					}
					state = stPathStart
				} else {
					h, ok := urlParseHost(s, false)
					if !ok {
						return nil, false
					}
					if h == "localhost" {
						h = ""
					}
					url.host = &h
					if hasOverride {
						return url, true
					}
					buf.Reset()
					state = stPathStart
				}
			} else {
				buf.WriteRune(c)
			}
		case stPathStart:
			if url.special() {
				state = stPath
				if c != '/' && c != '\\' {
					p--
				}
			} else if !hasOverride && c == '?' {
				empty := ""
				url.query = &empty
				state = stQuery
			} else if !hasOverride && c == '#' {
				empty := ""
				url.fragment = &empty
				state = stFragment
			} else if c != eof {
				state = stPath
				if c != '/' {
					p--
				}
			} else if hasOverride && url.host == nil {
				url.path = append(url.path, "")
			}
		case stPath:
			if c == eof || c == '/' || url.special() && c == '\\' || !hasOverride && (c == '?' || c == '#') {
				seg := buf.String()
				slash := c == '/' || url.special() && c == '\\'
				switch {
				case urlDoubleDot(seg):
					url.shortenPath()
					if !slash {
						url.path = append(url.path, "")
					}
				case urlSingleDot(seg) && !slash:
					url.path = append(url.path, "")
				case !urlSingleDot(seg):
					if url.scheme == "file" && len(url.path) == 0 && urlDriveLetter(seg) {
						seg = seg[:1] + ":"
					}
					url.path = append(url.path, seg)
				}
				buf.Reset()
				if c == '?' {
					empty := ""
					url.query = &empty
					state = stQuery
				} else if c == '#' {
					empty := ""
					url.fragment = &empty
					state = stFragment
				}
			} else {
				buf.WriteString(urlPercentEncode(string(c), urlPath))
			}
		case stOpaquePath:
			if c == '?' {
				empty := ""
				url.query = &empty
				state = stQuery
			} else if c == '#' {
				empty := ""
				url.fragment = &empty
				state = stFragment
			} else if c == ' ' && (remaining(1) == '?' || remaining(1) == '#') {
				url.path[0] += "%20"
			} else if c != eof {
				url.path[0] += urlPercentEncode(string(c), urlC0)
			}
		case stQuery:
			if !hasOverride && c == '#' || c == eof {
				set := urlQuery
				if url.special() {
					set = urlSpecialQuery
				}
				q := *url.query + urlPercentEncode(buf.String(), set)
				url.query = &q
				buf.Reset()
				if c == '#' {
					empty := ""
					url.fragment = &empty
					state = stFragment
				}
			} else if c != eof {
				buf.WriteRune(c)
			}
		case stFragment:
			if c != eof {
				f := *url.fragment + urlPercentEncode(string(c), urlFragment)
				url.fragment = &f
			}
		}
	}
	return url, true
}

// shortenPath removes the path's last segment, keeping a file URL's drive letter.
func (u *urlRecord) shortenPath() {
	if u.scheme == "file" && len(u.path) == 1 && urlNormalizedDriveLetter(u.path[0]) {
		return
	}
	if len(u.path) > 0 {
		u.path = u.path[:len(u.path)-1]
	}
}

func urlSingleDot(s string) bool { return s == "." || strings.EqualFold(s, "%2e") }
func urlDoubleDot(s string) bool {
	switch strings.ToLower(s) {
	case "..", ".%2e", "%2e.", "%2e%2e":
		return true
	}
	return false
}

// urlDriveLetter reports whether s is a Windows drive letter ("c:" or "c|").
func urlDriveLetter(s string) bool {
	return len(s) == 2 && isAlpha(rune(s[0])) && (s[1] == ':' || s[1] == '|')
}

// urlNormalizedDriveLetter reports whether s is a drive letter with ':'.
func urlNormalizedDriveLetter(s string) bool { return urlDriveLetter(s) && s[1] == ':' }

// urlStartsWithDriveLetter reports whether r starts with a drive letter
// followed by nothing or one of / \ ? #.
func urlStartsWithDriveLetter(r []rune) bool {
	if len(r) < 2 || !isAlpha(r[0]) || r[1] != ':' && r[1] != '|' {
		return false
	}
	return len(r) == 2 || strings.ContainsRune("/\\?#", r[2])
}

// urlParseHost is the host parser: an IPv6 literal, an opaque host (not
// special), or a domain (IDNA to ASCII) or IPv4 address.
func urlParseHost(s string, opaque bool) (string, bool) {
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return "", false
		}
		a, ok := urlParseIPv6(s[1 : len(s)-1])
		if !ok {
			return "", false
		}
		return "[" + urlSerializeIPv6(a) + "]", true
	}
	if opaque {
		if strings.ContainsAny(s, "\x00\t\n\r #/:<>?@[\\]^|") {
			return "", false
		}
		return urlPercentEncode(s, urlC0), true
	}
	domain := strings.ToValidUTF8(string(urlPercentDecode(s)), "\uFFFD")
	ascii, ok := urlDomainToASCII(domain)
	if !ok || ascii == "" {
		return "", false
	}
	for i := 0; i < len(ascii); i++ {
		if c := ascii[i]; c <= 0x20 || c == 0x7F || strings.IndexByte("#%/:<>?@[\\]^|", c) >= 0 {
			return "", false
		}
	}
	if urlEndsInNumber(ascii) {
		v, ok := urlParseIPv4(ascii)
		if !ok {
			return "", false
		}
		return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&0xFF, v>>8&0xFF, v&0xFF), true
	}
	return ascii, true
}

// urlIDNA is UTS #46 processing as the URL standard's domain to ASCII
// asks for it (not transitional, no hyphen checks, no DNS length check).
var urlIDNA = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.CheckHyphens(false),
	idna.CheckJoiners(true), idna.BidiRule(), idna.VerifyDNSLength(false), idna.StrictDomainName(false))

// urlDomainToASCII maps a domain to its ASCII form.
func urlDomainToASCII(d string) (string, bool) {
	ascii := true
	for i := 0; i < len(d); i++ {
		if d[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii && !strings.Contains(strings.ToLower(d), "xn--") {
		return strings.ToLower(d), true // the fast path: UTS #46 maps ASCII to lower case
	}
	out, err := urlIDNA.ToASCII(d)
	if err != nil {
		return "", false
	}
	return out, true
}

// urlEndsInNumber reports whether the domain's last label is a number
// (then it must be an IPv4 address).
func urlEndsInNumber(s string) bool {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := urlParseIPv4Number(last)
	return ok
}

// urlParseIPv4Number parses one part of an IPv4 address (decimal, 0x hex or 0 octal).
func urlParseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := 10
	if len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X") {
		s, base = s[2:], 16
	} else if len(s) >= 2 && s[0] == '0' {
		s, base = s[1:], 8
	}
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return math.MaxUint64, true
		}
		return 0, false
	}
	return n, true
}

// urlParseIPv4 parses a dotted IPv4 address of one to four numbers.
func urlParseIPv4(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return 0, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := urlParseIPv4Number(p)
		if !ok {
			return 0, false
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return 0, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return 0, false
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return uint32(v), true
}

// urlParseIPv6 parses the inside of an IPv6 literal.
func urlParseIPv6(s string) ([8]uint16, bool) {
	var a [8]uint16
	in := []rune(s)
	piece, compress := 0, -1
	p := 0
	at := func(i int) rune {
		if i < len(in) {
			return in[i]
		}
		return -1
	}
	hexVal := func(r rune) int {
		if r >= 0 && r < 128 && isHex(byte(r)) {
			v, _ := strconv.ParseUint(string(r), 16, 8)
			return int(v)
		}
		return -1
	}
	if at(p) == ':' {
		if at(p+1) != ':' {
			return a, false
		}
		p += 2
		piece++
		compress = piece
	}
	for at(p) != -1 {
		if piece == 8 {
			return a, false
		}
		if at(p) == ':' {
			if compress >= 0 {
				return a, false
			}
			p++
			piece++
			compress = piece
			continue
		}
		value, length := 0, 0
		for length < 4 && hexVal(at(p)) >= 0 {
			value = value*16 + hexVal(at(p))
			p++
			length++
		}
		if at(p) == '.' {
			if length == 0 {
				return a, false
			}
			p -= length
			if piece > 6 {
				return a, false
			}
			seen := 0
			for at(p) != -1 {
				ipv4 := -1
				if seen > 0 {
					if at(p) == '.' && seen < 4 {
						p++
					} else {
						return a, false
					}
				}
				if !isDigit(at(p)) {
					return a, false
				}
				for isDigit(at(p)) {
					n := int(at(p) - '0')
					if ipv4 == -1 {
						ipv4 = n
					} else if ipv4 == 0 {
						return a, false
					} else {
						ipv4 = ipv4*10 + n
					}
					if ipv4 > 255 {
						return a, false
					}
					p++
				}
				a[piece] = a[piece]*0x100 + uint16(ipv4)
				seen++
				if seen == 2 || seen == 4 {
					piece++
				}
			}
			if seen != 4 {
				return a, false
			}
			break
		} else if at(p) == ':' {
			p++
			if at(p) == -1 {
				return a, false
			}
		} else if at(p) != -1 {
			return a, false
		}
		a[piece] = uint16(value)
		piece++
	}
	if compress >= 0 {
		swaps := piece - compress
		piece = 7
		for piece != 0 && swaps > 0 {
			a[piece], a[compress+swaps-1] = a[compress+swaps-1], a[piece]
			piece--
			swaps--
		}
	} else if piece != 8 {
		return a, false
	}
	return a, true
}

// urlSerializeIPv6 writes an address compressing its longest run of zeros.
func urlSerializeIPv6(a [8]uint16) string {
	best, bestLen := -1, 1
	for i := 0; i < 8; {
		j := i
		for j < 8 && a[j] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		i = j + 1
	}
	var b strings.Builder
	ignore0 := false
	for i := 0; i < 8; i++ {
		if ignore0 && a[i] == 0 {
			continue
		}
		ignore0 = false
		if i == best {
			if i == 0 {
				b.WriteString("::")
			} else {
				b.WriteString(":")
			}
			ignore0 = true
			continue
		}
		b.WriteString(strconv.FormatUint(uint64(a[i]), 16))
		if i != 7 {
			b.WriteByte(':')
		}
	}
	return b.String()
}

// pathname is the URL's path as the pathname getter shows it.
func (u *urlRecord) pathname() string {
	if u.opaque {
		return u.path[0]
	}
	var b strings.Builder
	for _, s := range u.path {
		b.WriteByte('/')
		b.WriteString(s)
	}
	return b.String()
}

// href serializes the URL.
func (u *urlRecord) href() string {
	var b strings.Builder
	b.WriteString(u.scheme + ":")
	if u.host != nil {
		b.WriteString("//")
		if u.username != "" || u.password != "" {
			b.WriteString(u.username)
			if u.password != "" {
				b.WriteString(":" + u.password)
			}
			b.WriteByte('@')
		}
		b.WriteString(*u.host)
		if u.port >= 0 {
			b.WriteString(":" + strconv.Itoa(u.port))
		}
	} else if !u.opaque && len(u.path) > 1 && u.path[0] == "" {
		b.WriteString("/.")
	}
	b.WriteString(u.pathname())
	if u.query != nil {
		b.WriteString("?" + *u.query)
	}
	if u.fragment != nil {
		b.WriteString("#" + *u.fragment)
	}
	return b.String()
}

// origin serializes the URL's origin ("null" for an opaque one).
func (u *urlRecord) origin() string {
	switch u.scheme {
	case "blob":
		if p, ok := urlParse(u.pathname(), nil, nil, 0, false); ok && (p.scheme == "http" || p.scheme == "https") {
			return p.origin()
		}
	case "ftp", "http", "https", "ws", "wss":
		s := u.scheme + "://" + *u.host
		if u.port >= 0 {
			s += ":" + strconv.Itoa(u.port)
		}
		return s
	}
	return "null"
}

// urlFields are the URL's members as the URL class of the VMs reads them.
func (u *urlRecord) fields() map[string]string {
	host, hostname, port := "", "", ""
	if u.host != nil {
		hostname = *u.host
		host = hostname
		if u.port >= 0 {
			port = strconv.Itoa(u.port)
			host += ":" + port
		}
	}
	search, hash := "", ""
	if u.query != nil && *u.query != "" {
		search = "?" + *u.query
	}
	if u.fragment != nil && *u.fragment != "" {
		hash = "#" + *u.fragment
	}
	return map[string]string{
		"href": u.href(), "origin": u.origin(), "protocol": u.scheme + ":", "username": u.username, "password": u.password,
		"host": host, "hostname": hostname, "port": port, "pathname": u.pathname(), "search": search, "hash": hash,
	}
}

// urlParseString parses input against the optional base string.
func urlParseString(input string, base *string) (*urlRecord, bool) {
	var b *urlRecord
	if base != nil {
		var ok bool
		if b, ok = urlParse(*base, nil, nil, 0, false); !ok {
			return nil, false
		}
	}
	return urlParse(input, b, nil, 0, false)
}

// urlSet applies the URL standard's setter name (the URL class's member,
// or "query" for URLSearchParams) with value to the URL href; ok is false
// when the setter leaves the URL unchanged.
func urlSet(href, name, value string) (*urlRecord, bool) {
	u, ok := urlParse(href, nil, nil, 0, false)
	if !ok {
		return nil, false
	}
	cannotHaveCredentials := u.host == nil || *u.host == "" || u.scheme == "file"
	switch name {
	case "protocol":
		return urlParse(value+":", nil, u, stSchemeStart, true)
	case "username", "password":
		if cannotHaveCredentials {
			return nil, false
		}
		if name == "username" {
			u.username = urlPercentEncode(value, urlUserinfo)
		} else {
			u.password = urlPercentEncode(value, urlUserinfo)
		}
		return u, true
	case "host", "hostname":
		if u.opaque {
			return nil, false
		}
		st := stHost
		if name == "hostname" {
			st = stHostname
		}
		// A setter ignores the parser's failure and keeps what it set
		// before: "example.com:65536" sets the host, not the port.
		urlParse(value, nil, u, st, true)
		return u, true
	case "port":
		if cannotHaveCredentials {
			return nil, false
		}
		if value == "" {
			u.port = -1
			return u, true
		}
		return urlParse(value, nil, u, stPort, true)
	case "pathname":
		if u.opaque {
			return nil, false
		}
		u.path = nil
		return urlParse(value, nil, u, stPathStart, true)
	case "search", "query":
		if value == "" && name == "search" {
			u.query = nil
			return u, true
		}
		value = strings.TrimPrefix(value, "?")
		if name == "query" {
			u.query = &value // already serialized by URLSearchParams
			return u, true
		}
		empty := ""
		u.query = &empty
		return urlParse(value, nil, u, stQuery, true)
	case "hash":
		if value == "" {
			u.fragment = nil
			return u, true
		}
		empty := ""
		u.fragment = &empty
		return urlParse(strings.TrimPrefix(value, "#"), nil, u, stFragment, true)
	}
	return nil, false
}

// urlNatives adds the Go halves of URL and URLSearchParams.
func urlNatives(vm *goja.Runtime, n *goja.Object) {
	n.Set("urlParse", func(input string, base goja.Value) goja.Value {
		var b *string
		if base != nil && !goja.IsUndefined(base) {
			s := base.String()
			b = &s
		}
		u, ok := urlParseString(input, b)
		if !ok {
			return goja.Null()
		}
		return vm.ToValue(u.fields())
	})
	n.Set("urlSet", func(href, name, value string) goja.Value {
		u, ok := urlSet(href, name, value)
		if !ok {
			return goja.Null()
		}
		return vm.ToValue(u.fields())
	})
	n.Set("formParse", func(s string) [][]string {
		out := [][]string{}
		for _, seq := range strings.Split(s, "&") {
			if seq == "" {
				continue
			}
			name, value, _ := strings.Cut(seq, "=")
			dec := func(x string) string {
				return strings.ToValidUTF8(string(urlPercentDecode(strings.ReplaceAll(x, "+", " "))), "\uFFFD")
			}
			out = append(out, []string{dec(name), dec(value)})
		}
		return out
	})
	n.Set("formSerialize", func(pairs [][]string) string {
		var b strings.Builder
		enc := func(s string) string {
			return strings.ReplaceAll(urlPercentEncode(s, func(c byte) bool { return c != ' ' && urlForm(c) }), " ", "+")
		}
		for i, p := range pairs {
			if i > 0 {
				b.WriteByte('&')
			}
			b.WriteString(enc(p[0]) + "=" + enc(p[1]))
		}
		return b.String()
	})
}
