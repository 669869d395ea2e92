package main

// SigV4 as the built-in object storage verifies it (headers, presigned
// URLs and aws-chunked streaming bodies); the S3 client of user code
// (storage_client.go) signs with the same canonical request.

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// s3Signature is the parsed SigV4 signature of one request.
type s3Signature struct {
	presigned     bool
	accessKey     string
	date          string // yyyymmdd of the credential scope
	region        string
	service       string
	terminator    string
	amzDate       string // request time, ISO 8601 basic
	expires       string // presigned only, seconds
	signedHeaders []string
	signature     string
	payloadHash   string // x-amz-content-sha256 (or UNSIGNED-PAYLOAD when presigned)
}

// scope is the credential scope the string to sign names.
func (sig *s3Signature) scope() string {
	return sig.date + "/" + sig.region + "/" + sig.service + "/" + sig.terminator
}

// malformed returns the error for a badly formed signature of this kind.
func (sig *s3Signature) malformed(message string) *s3Error {
	if sig.presigned {
		return s3BadRequest("AuthorizationQueryParametersError", message)
	}
	return s3BadRequest("AuthorizationHeaderMalformed", message)
}

// authenticate verifies the request's SigV4 signature and wraps its body so that reading it
// verifies the payload the signature covers. Unsigned requests are denied; SigV2 presigned
// GET and HEAD URLs are verified by authenticatePresignedV2 (s3_sigv2.go); other requests
// signed with SigV2 are told how to switch.
func (s *s3Server) authenticate(r *http.Request) error {
	q := r.URL.Query()
	var sig *s3Signature
	var err error
	switch {
	case q.Has("X-Amz-Algorithm") || q.Has("X-Amz-Signature"):
		sig, err = s3ParsePresigned(q)
	case r.Header.Get("Authorization") != "":
		sig, err = s3ParseAuthorization(r.Header)
	case q.Has("AWSAccessKeyId") || q.Has("Signature"):
		return s.authenticatePresignedV2(r, q)
	default:
		return s3ErrAccessDenied
	}
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(sig.accessKey), []byte(s.accessKey)) != 1 {
		return &s3Error{http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."}
	}
	if sig.service != "s3" || sig.terminator != "aws4_request" || sig.region == "" {
		return sig.malformed("The credential scope must be <date>/<region>/s3/aws4_request.")
	}
	if !slices.Contains(sig.signedHeaders, "host") {
		return sig.malformed("The host header must be signed.")
	}
	t, err := time.Parse(s3AmzDateFormat, sig.amzDate)
	if err != nil || sig.date != sig.amzDate[:8] {
		return sig.malformed("The request date must be ISO 8601 basic and match the credential date.")
	}
	if err := s.checkTime(sig, t); err != nil {
		return err
	}
	key := s3SigningKey(s.secretKey, sig.date, sig.region, sig.service)
	if !s3SignatureMatches(r, sig, key) {
		return s3ErrSignature
	}
	return s3WrapBody(r, sig, key)
}

// checkTime rejects a request signed too far from now, or a presigned URL out of its validity.
func (s *s3Server) checkTime(sig *s3Signature, t time.Time) error {
	now := s.now()
	if !sig.presigned {
		if d := now.Sub(t); d > s3MaxClockSkew || d < -s3MaxClockSkew {
			return &s3Error{http.StatusForbidden, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."}
		}
		return nil
	}
	secs, err := strconv.Atoi(sig.expires)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second > s3MaxPresignExpiry {
		return sig.malformed("X-Amz-Expires must be a number of seconds between 1 and 604800.")
	}
	if now.After(t.Add(time.Duration(secs) * time.Second)) {
		return &s3Error{http.StatusForbidden, "AccessDenied", "Request has expired."}
	}
	if t.After(now.Add(s3MaxClockSkew)) {
		return &s3Error{http.StatusForbidden, "AccessDenied", "Request is not valid yet."}
	}
	return nil
}

// s3ParseAuthorization parses a SigV4 Authorization header and the headers it relies on.
func s3ParseAuthorization(h http.Header) (*s3Signature, error) {
	sig := &s3Signature{}
	algorithm, fields, _ := strings.Cut(h.Get("Authorization"), " ")
	if algorithm == "AWS" {
		return nil, s3ErrSignatureV2
	}
	if algorithm != s3Algorithm {
		return nil, s3BadRequest("InvalidRequest", "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.")
	}
	var credential, signedHeaders string
	for _, field := range strings.Split(fields, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch name {
		case "Credential":
			credential = value
		case "SignedHeaders":
			signedHeaders = value
		case "Signature":
			sig.signature = value
		}
	}
	if credential == "" || signedHeaders == "" || sig.signature == "" {
		return nil, sig.malformed("The authorization header needs Credential, SignedHeaders and Signature.")
	}
	if err := sig.parseCredential(credential); err != nil {
		return nil, err
	}
	sig.signedHeaders = strings.Split(signedHeaders, ";")
	sig.amzDate = h.Get("X-Amz-Date")
	if sig.amzDate == "" {
		t, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			return nil, &s3Error{http.StatusForbidden, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header."}
		}
		sig.amzDate = t.UTC().Format(s3AmzDateFormat)
	}
	sig.payloadHash = h.Get("X-Amz-Content-Sha256")
	if sig.payloadHash == "" {
		return nil, s3BadRequest("InvalidRequest", "Missing required header for this request: x-amz-content-sha256.")
	}
	return sig, nil
}

// s3ParsePresigned parses the SigV4 query parameters of a presigned URL.
func s3ParsePresigned(q url.Values) (*s3Signature, error) {
	sig := &s3Signature{
		presigned:   true,
		amzDate:     q.Get("X-Amz-Date"),
		expires:     q.Get("X-Amz-Expires"),
		signature:   q.Get("X-Amz-Signature"),
		payloadHash: q.Get("X-Amz-Content-Sha256"),
	}
	if q.Get("X-Amz-Algorithm") != s3Algorithm || sig.amzDate == "" || sig.expires == "" || sig.signature == "" ||
		q.Get("X-Amz-SignedHeaders") == "" || q.Get("X-Amz-Credential") == "" {
		return nil, sig.malformed("Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.")
	}
	if sig.payloadHash == "" {
		sig.payloadHash = s3UnsignedPayload
	}
	sig.signedHeaders = strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	return sig, sig.parseCredential(q.Get("X-Amz-Credential"))
}

// parseCredential splits <access key>/<date>/<region>/<service>/aws4_request.
func (sig *s3Signature) parseCredential(credential string) error {
	parts := strings.Split(credential, "/")
	if len(parts) != 5 {
		return sig.malformed("The credential must be <access key>/<date>/<region>/<service>/aws4_request.")
	}
	sig.accessKey, sig.date, sig.region, sig.service, sig.terminator = parts[0], parts[1], parts[2], parts[3], parts[4]
	return nil
}

// s3SigningKey derives the SigV4 signing key of a secret for one day, region and service.
func s3SigningKey(secret, date, region, service string) []byte {
	key := []byte("AWS4" + secret)
	for _, part := range []string{date, region, service, "aws4_request"} {
		key = s3HMAC(key, part)
	}
	return key
}

// s3HMAC returns HMAC-SHA256(key, data).
func s3HMAC(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// s3SignLines returns the hex SigV4 signature of a string to sign given as its lines.
func s3SignLines(key []byte, lines ...string) string {
	return hex.EncodeToString(s3HMAC(key, strings.Join(lines, "\n")))
}

// s3SHA256Hex returns the hex SHA-256 of s.
func s3SHA256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// s3SignatureMatches reports whether the request's signature is the one its canonical request
// yields. S3 encodes each path byte once (never twice); the path is canonicalised from its
// decoded form, and, should the client have encoded it differently, also tried as sent.
func s3SignatureMatches(r *http.Request, sig *s3Signature, key []byte) bool {
	query := s3CanonicalQuery(r.URL.RawQuery, sig.presigned)
	headers := s3CanonicalHeaders(r, sig.signedHeaders)
	for _, path := range s3RequestPaths(r) {
		cr := s3CanonicalRequest{method: r.Method, path: path, query: query, headers: headers, signedHeaders: sig.signedHeaders, payloadHash: sig.payloadHash}
		if hmac.Equal([]byte(cr.signature(key, sig.amzDate, sig.scope())), []byte(sig.signature)) {
			return true
		}
	}
	return false
}

// s3RequestPaths are the encodings of r's path a signature may cover: each
// byte encoded once from the decoded path (as S3 does), and, should the
// client have encoded it differently, the path as sent.
func s3RequestPaths(r *http.Request) []string {
	paths := []string{s3URIEncode(r.URL.Path, true)}
	if raw := r.URL.EscapedPath(); raw != paths[0] {
		paths = append(paths, raw)
	}
	return paths
}

// s3CanonicalRequest is the SigV4 canonical request of one request, its parts already
// canonical (s3URIEncode, s3CanonicalQuery, s3CanonicalHeaders). The server verifies
// signatures with it and the storage client (storage_client.go) signs with it.
type s3CanonicalRequest struct {
	method        string
	path          string
	query         string
	headers       string
	signedHeaders []string
	payloadHash   string
}

// signature returns the hex SigV4 signature of the request at amzDate in scope: the
// string to sign (algorithm, date, scope, hash of the canonical request) signed with key
// (s3SigningKey).
func (cr s3CanonicalRequest) signature(key []byte, amzDate, scope string) string {
	canonical := strings.Join([]string{cr.method, cr.path, cr.query, cr.headers, strings.Join(cr.signedHeaders, ";"), cr.payloadHash}, "\n")
	return s3SignLines(key, s3Algorithm, amzDate, scope, s3SHA256Hex(canonical))
}

// s3URIEncode percent-encodes every byte of s but the unreserved characters A-Z a-z 0-9 - . _ ~
// (and '/' when keepSlash), with upper-case hex, as SigV4 canonical requests require.
func s3URIEncode(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/' && keepSlash {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// s3CanonicalQuery returns the canonical query string: every parameter decoded, re-encoded,
// and sorted by name then value; a presigned URL's own X-Amz-Signature is left out.
func s3CanonicalQuery(raw string, presigned bool) string {
	var pairs [][2]string
	for _, param := range strings.Split(raw, "&") {
		if param == "" {
			continue
		}
		name, value, _ := strings.Cut(param, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if v, err := url.QueryUnescape(value); err == nil {
			value = v
		}
		if presigned && name == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, [2]string{s3URIEncode(name, false), s3URIEncode(value, false)})
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	params := make([]string, len(pairs))
	for i, p := range pairs {
		params[i] = p[0] + "=" + p[1]
	}
	return strings.Join(params, "&")
}

// s3CanonicalHeaders returns the canonical headers block ("name:value\n" per signed header):
// values trimmed, inner runs of spaces collapsed, repeated headers joined with commas. Go keeps
// Host out of the header map, so it comes from the request.
func s3CanonicalHeaders(r *http.Request, names []string) string {
	var b strings.Builder
	for _, name := range names {
		values := r.Header.Values(name)
		switch {
		case name == "host":
			values = []string{r.Host}
		case name == "content-length" && len(values) == 0 && r.ContentLength >= 0:
			values = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
		b.WriteString(name)
		b.WriteByte(':')
		for i, v := range values {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.Join(strings.Fields(v), " "))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// s3WrapBody replaces the request body with one that verifies, as it is read, the payload the
// signature covers: a hex SHA-256, or an aws-chunked body (chunk signatures, trailers and the
// decoded length). UNSIGNED-PAYLOAD is passed through.
func s3WrapBody(r *http.Request, sig *s3Signature, key []byte) error {
	var body io.Reader
	switch mode := sig.payloadHash; mode {
	case s3UnsignedPayload:
		return nil
	case s3StreamingSigned, s3StreamingSignedTrailer, s3StreamingUnsignedTrailer:
		if sig.presigned {
			return s3BadRequest("InvalidRequest", "A presigned URL cannot carry an aws-chunked body.")
		}
		declared, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
		if err != nil || declared < 0 {
			return &s3Error{http.StatusLengthRequired, "MissingContentLength", "You must provide x-amz-decoded-content-length with an aws-chunked body."}
		}
		if r.Trailer == nil {
			r.Trailer = http.Header{}
		}
		c := &s3ChunkedReader{br: bufio.NewReader(r.Body), declared: declared, trailer: r.Trailer}
		if mode != s3StreamingUnsignedTrailer {
			c.chain = &s3ChunkChain{key: key, amzDate: sig.amzDate, scope: sig.scope(), prev: sig.signature, trailer: mode == s3StreamingSignedTrailer}
		}
		body = c
	default:
		want, err := hex.DecodeString(mode)
		if err != nil || len(want) != sha256.Size {
			return s3BadRequest("InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, a STREAMING-* value, or a hex SHA-256 of the payload.")
		}
		body = &s3SHA256Reader{r: r.Body, h: sha256.New(), want: want}
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{body, r.Body}
	return nil
}

// s3SHA256Reader passes a body through and fails its final read when the body does not hash
// to want, so nothing read from a corrupted body is ever committed.
type s3SHA256Reader struct {
	r    io.Reader
	h    hash.Hash
	want []byte
}

// Read reads from the body, returning XAmzContentSHA256Mismatch instead of io.EOF on a mismatch.
func (c *s3SHA256Reader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	if err == io.EOF && !bytes.Equal(c.h.Sum(nil), c.want) {
		return n, s3BadRequest("XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return n, err
}

// s3ChunkChain is the signature chain of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body: each chunk
// signs its data and the previous signature, the first one the request's (the seed).
type s3ChunkChain struct {
	key     []byte
	amzDate string
	scope   string
	prev    string
	trailer bool // the trailing headers are signed too (…-PAYLOAD-TRAILER)
}

// verify checks one link of the chain: lines are the string to sign after its date, scope and
// previous signature.
func (c *s3ChunkChain) verify(algorithm, got string, lines ...string) error {
	want := s3SignLines(c.key, append([]string{algorithm, c.amzDate, c.scope, c.prev}, lines...)...)
	if !hmac.Equal([]byte(want), []byte(got)) {
		return s3ErrSignature
	}
	c.prev = want
	return nil
}

// s3ChunkedReader decodes an aws-chunked body ("<hex size>[;chunk-signature=<sig>]\r\n<data>\r\n"
// …, a zero-size chunk, then optional trailing headers and an empty line). It verifies each
// chunk's signature when chain is set, and at the end the decoded length; it stores the trailing
// headers in trailer before it returns io.EOF.
type s3ChunkedReader struct {
	br        *bufio.Reader
	chain     *s3ChunkChain // nil for STREAMING-UNSIGNED-PAYLOAD-TRAILER
	trailer   http.Header
	declared  int64 // x-amz-decoded-content-length
	total     int64
	left      int64     // bytes of the current chunk not read yet
	chunkSig  string    // signature the current chunk claims
	chunkHash hash.Hash // SHA-256 of the current chunk, when signed
	err       error     // sticky; io.EOF after a verified end
}

// Read returns decoded bytes of the body.
func (c *s3ChunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.left == 0 {
		if c.err = c.startChunk(); c.err != nil {
			return 0, c.err
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	c.total += int64(n)
	if c.chunkHash != nil {
		c.chunkHash.Write(p[:n])
	}
	switch {
	case err == io.EOF:
		c.err = s3ErrIncompleteBody
	case err != nil:
		c.err = err
	case c.left == 0:
		c.err = c.endChunk()
	}
	if c.err != nil {
		return n, c.err
	}
	return n, nil
}

// readLine reads one CRLF-terminated line of chunk framing, without its terminator.
func (c *s3ChunkedReader) readLine() (string, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return "", s3ErrChunkedEncoding
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r"), nil
}

// startChunk reads a chunk header; at the final zero-size chunk it finishes the body.
func (c *s3ChunkedReader) startChunk() error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	sizeHex, ext, _ := strings.Cut(line, ";")
	size, err := strconv.ParseInt(sizeHex, 16, 64)
	if err != nil || size < 0 || size > s3MaxObjectSize {
		return s3ErrChunkedEncoding
	}
	if c.chain != nil {
		sig, ok := strings.CutPrefix(ext, "chunk-signature=")
		if !ok {
			return s3ErrChunkedEncoding
		}
		c.chunkSig = sig
		c.chunkHash = sha256.New()
	}
	if size == 0 {
		return c.finish()
	}
	c.left = size
	return nil
}

// endChunk reads the CRLF after a chunk's data and verifies the chunk's signature.
func (c *s3ChunkedReader) endChunk() error {
	var crlf [2]byte
	if _, err := io.ReadFull(c.br, crlf[:]); err != nil || crlf != [2]byte{'\r', '\n'} {
		return s3ErrChunkedEncoding
	}
	if c.chain == nil {
		return nil
	}
	return c.chain.verify("AWS4-HMAC-SHA256-PAYLOAD", c.chunkSig, s3EmptySHA256, hex.EncodeToString(c.chunkHash.Sum(nil)))
}

// finish verifies the final chunk, reads and verifies the trailing headers and checks the
// decoded length; it returns io.EOF when all is well.
func (c *s3ChunkedReader) finish() error {
	if c.chain != nil {
		if err := c.chain.verify("AWS4-HMAC-SHA256-PAYLOAD", c.chunkSig, s3EmptySHA256, s3EmptySHA256); err != nil {
			return err
		}
	}
	var trailerSig string
	var canonical []string
	for lines := 0; ; lines++ {
		line, err := c.br.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			break // the body may end right after the final chunk
		}
		if err != nil {
			return s3ErrChunkedEncoding
		}
		text := strings.TrimRight(string(line), "\r\n")
		if text == "" {
			break
		}
		if lines == s3MaxTrailerLines {
			return s3ErrChunkedEncoding
		}
		name, value, ok := strings.Cut(text, ":")
		name, value = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(value)
		if !ok || name == "" {
			return s3ErrChunkedEncoding
		}
		if name == "x-amz-trailer-signature" {
			trailerSig = value
			continue
		}
		c.trailer.Set(name, value)
		canonical = append(canonical, name+":"+value+"\n")
	}
	if c.chain != nil && c.chain.trailer {
		slices.Sort(canonical)
		if err := c.chain.verify("AWS4-HMAC-SHA256-TRAILER", trailerSig, s3SHA256Hex(strings.Join(canonical, ""))); err != nil {
			return err
		}
	}
	if c.total != c.declared {
		return s3ErrIncompleteBody
	}
	return io.EOF
}
