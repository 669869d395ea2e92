package main

// Request signing between the control plane and a box (DESIGN §7, SPEC §5
// "Box signing and identity"). The control plane signs every request it
// sends a box with the deployment's shared secret (signSender.sign); the
// box verifies it (signVerifier).
//
// Version 2, what the control plane sends:
//
//	x-svc-timestamp:      unix seconds when it was signed
//	x-svc-sender:         a sender id of the signing process, 16–128 characters of [A-Za-z0-9_-]
//	x-svc-counter:        that sender's request number, 1, 2, 3, … (decimal)
//	x-svc-signed-headers: the headers the box acts on that the MAC covers (x-svc-principal)
//	x-svc-signature:      v2=<hex HMAC-SHA256>
//
// The MAC covers the lines "v2", sender, counter, timestamp, METHOD,
// target, hex(sha256(body)) and, per signed header, "name:value", each
// ending in "\n" (no field can hold a newline). target is the request
// target as sent on the wire: the escaped path, plus "?" and the raw query
// when there is one. Replay protection is a sliding window per sender, as
// IPsec's (RFC 4303 §3.4.3; sign_window.go): its state is a counter and a
// bitmap per sender kept in the box's PostgreSQL, so only a holder of the
// secret can add state and no amount of signed traffic exhausts it.
//
// Version 1, still accepted from older control planes but only on a
// request without x-svc-principal (which it does not cover):
//
//	x-svc-timestamp, x-svc-nonce (16–128 characters of [A-Za-z0-9_-], never
//	reused), x-svc-signature: v1=<hex HMAC-SHA256> over
//	"timestamp.nonce.METHOD.target.hex(sha256(body))"
//
// whose nonces a box remembers in memory, at most signNonceCap of them.

import (
	"bytes"
	"container/heap"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Names and limits of request signing.
const (
	signTimestampHeader     = "x-svc-timestamp"
	signNonceHeader         = "x-svc-nonce"
	signSenderHeader        = "x-svc-sender"
	signCounterHeader       = "x-svc-counter"
	signSignedHeadersHeader = "x-svc-signed-headers"
	signSignatureHeader     = "x-svc-signature"
	// signPrincipalHeader names, on a signed request the control plane
	// proxies, the caller it acts for (cp-user:<id> or cp-key:<id>); a box
	// honours it only on a request whose v2 signature covers it.
	signPrincipalHeader = "x-svc-principal"
	// signRefusedHeader is on a box's refusal of a signed request: the
	// check that failed (signCheckName), so that the control plane tells a
	// secret mismatch from a full replay window without reading the body.
	signRefusedHeader = "x-svc-signature-refused"
	// signCodeReplayWindow is the error code of a signed request refused
	// for capacity (the box's, and the control plane's proxy passing it
	// on): retryable, the secret is fine.
	signCodeReplayWindow = "replay_window_full"
	// signV1Prefix and signV2Prefix start the signature header's value.
	signV1Prefix = "v1="
	signV2Prefix = "v2="
	// signWindow is how far the signer's clock may be from the box's, either
	// way; replay state is kept for as long as its request could be valid.
	signWindow = 5 * time.Minute
	// signNonceCap bounds the v1 nonces a verifier remembers. At the cap it
	// refuses new v1 requests (errSignCapacity, 503) until entries expire:
	// forgetting a live nonce would reopen replay. The control plane signs
	// v2, which has no such cap.
	signNonceCap = 200_000
	// signMinSecret is the shortest secret a verifier accepts, in bytes.
	signMinSecret = 16
)

// signActedHeaders are the request headers a box acts on: a v2 signature
// must cover each one the request carries, and a v1 request must carry none.
var signActedHeaders = []string{signPrincipalHeader}

// signHeaders are every header of a signature, v1 or v2: never forwarded
// from a caller, and their presence makes a box verify the request.
var signHeaders = []string{signTimestampHeader, signNonceHeader, signSenderHeader, signCounterHeader, signSignedHeadersHeader, signSignatureHeader}

// The checks a signed request can fail. A *signError wraps exactly one.
var (
	errSignMissingHeader  = errors.New("missing signature header")
	errSignMalformed      = errors.New("malformed signature header")
	errSignClockSkew      = errors.New("clock skew beyond the signing window")
	errSignMismatch       = errors.New("signature mismatch")
	errSignReusedNonce    = errors.New("reused nonce")
	errSignReplayed       = errors.New("replayed counter")
	errSignStale          = errors.New("counter older than the replay window")
	errSignUnsignedHeader = errors.New("header not covered by the signature")
	errSignCapacity       = errors.New("replay window full: too many signed requests or senders in the signing window")
	errSignBodyTooLarge   = errors.New("signed request body too large")
	errSignSecretTooShort = errors.New("signing secret too short")
)

// signCheckNames are the values of signRefusedHeader.
var signCheckNames = map[error]string{
	errSignMissingHeader: "missing_header", errSignMalformed: "malformed", errSignClockSkew: "clock_skew",
	errSignMismatch: "mismatch", errSignReusedNonce: "replayed", errSignReplayed: "replayed", errSignStale: "stale",
	errSignUnsignedHeader: "unsigned_header", errSignCapacity: "capacity", errSignBodyTooLarge: "too_large",
}

// signCheckName is the signRefusedHeader value of err, "" when err is no
// check of a signed request.
func signCheckName(err error) string {
	var se *signError
	if !errors.As(err, &se) {
		return ""
	}
	return signCheckNames[se.Check]
}

// signIDForeign reports whether r is outside the nonce and sender alphabet
// [A-Za-z0-9_-].
func signIDForeign(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
}

// signIDValid reports whether s is a well-formed nonce or sender id.
func signIDValid(s string) bool {
	return len(s) >= 16 && len(s) <= 128 && strings.IndexFunc(s, signIDForeign) < 0
}

// signError is a refused signed request: Check is one of the errSign…
// sentinels, Header the header at fault (when one is), and for a clock skew
// both clocks. It never holds the secret or the expected MAC.
type signError struct {
	Check  error
	Header string
	Signed time.Time // when the request says it was signed (clock skew)
	Now    time.Time // the verifier's clock (clock skew)
}

// Error names the check, the header and, for a skew, both clocks.
func (e *signError) Error() string {
	msg := "verify signed request: " + e.Check.Error()
	if e.Header != "" {
		msg += " (" + e.Header + ")"
	}
	if errors.Is(e.Check, errSignClockSkew) {
		d := e.Now.Sub(e.Signed)
		if d < 0 {
			d = -d
		}
		msg += fmt.Sprintf(": signed at %s (unix %d), this clock %s (unix %d), %s apart; window ±%s",
			e.Signed.UTC().Format(time.RFC3339), e.Signed.Unix(), e.Now.UTC().Format(time.RFC3339), e.Now.Unix(), d, signWindow)
	}
	return msg
}

// Unwrap returns the check that failed.
func (e *signError) Unwrap() error { return e.Check }

// signRequestTarget is the request target the MAC covers: what an
// http.Client sends for req (escaped path, "?" and query when present), or,
// on a server, the target the client sent.
func signRequestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

// signMAC is the v1 MAC: HMAC-SHA256(secret, "timestamp.nonce.METHOD.target.hex(sha256(body))").
func signMAC(secret []byte, timestamp, nonce, method, target string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, timestamp+"."+nonce+"."+method+"."+target+".")
	io.WriteString(m, hex.EncodeToString(sum[:]))
	return m.Sum(nil)
}

// signMACv2 is the v2 MAC over r (whose body is body) as sent by sender
// with counter at timestamp, covering the headers named in signed.
func signMACv2(secret []byte, sender, counter, timestamp string, r *http.Request, body []byte, signed []string) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, secret)
	for _, f := range [...]string{"v2", sender, counter, timestamp, r.Method, signRequestTarget(r), hex.EncodeToString(sum[:])} {
		io.WriteString(m, f+"\n")
	}
	for _, h := range signed {
		io.WriteString(m, h+":"+r.Header.Get(h)+"\n")
	}
	return m.Sum(nil)
}

// signSender is one signing process: lanes, each a sender id chosen at
// random when the process starts and a counter that numbers its requests.
// A restarted or second control plane process is other senders, so no
// counter has to survive a restart or be shared between processes. Each
// request takes the next lane in turn: a box decides the counters of one
// sender one at a time (sign_window.go), so lanes let it decide a busy
// process's requests in parallel. Safe for concurrent use.
type signSender struct {
	lanes []signLane
	next  atomic.Uint64
}

// signLane is one sender id of a signSender and its last counter.
type signLane struct {
	id      string
	counter atomic.Uint64
}

// newSignSender returns a sender of n lanes (at least 1), each with a
// fresh random id (26 base32 characters, 130 bits).
func newSignSender(n int) *signSender {
	s := &signSender{lanes: make([]signLane, max(n, 1))}
	for i := range s.lanes {
		s.lanes[i].id = rand.Text()
	}
	return s
}

// sign signs req, whose body is body (the caller sets req.Body), with
// secret at now (v2): the timestamp, the next lane's id and counter, the
// acted-on headers req carries, and the signature.
func (s *signSender) sign(req *http.Request, body, secret []byte, now time.Time) {
	var signed []string
	for _, h := range signActedHeaders {
		if _, ok := req.Header[http.CanonicalHeaderKey(h)]; ok {
			signed = append(signed, h)
		}
	}
	lane := &s.lanes[s.next.Add(1)%uint64(len(s.lanes))]
	ts, counter := strconv.FormatInt(now.Unix(), 10), strconv.FormatUint(lane.counter.Add(1), 10)
	req.Header.Del(signNonceHeader)
	req.Header.Set(signTimestampHeader, ts)
	req.Header.Set(signSenderHeader, lane.id)
	req.Header.Set(signCounterHeader, counter)
	req.Header.Set(signSignedHeadersHeader, strings.Join(signed, ","))
	req.Header.Set(signSignatureHeader, signV2Prefix+hex.EncodeToString(signMACv2(secret, lane.id, counter, ts, req, body, signed)))
}

// signVerifier checks signed requests against one secret: v2 against the
// per-sender windows in the box's PostgreSQL, v1 against the nonces it
// remembers for the signing window. Safe for concurrent use.
type signVerifier struct {
	secret  []byte
	now     func() time.Time
	windows *signWindows
	limit   int // signNonceCap; tests lower it

	mu     sync.Mutex
	seen   map[string]bool
	expiry signNonceHeap // the nonces of seen, soonest expiry first
}

// newSignVerifier returns a verifier of secret (at least signMinSecret
// bytes) keeping its replay windows in db (platform migrations applied);
// now is its clock (nil: time.Now).
func newSignVerifier(secret []byte, db *pgxpool.Pool, now func() time.Time) (*signVerifier, error) {
	if len(secret) < signMinSecret {
		return nil, fmt.Errorf("new signature verifier: %w: want at least %d bytes", errSignSecretTooShort, signMinSecret)
	}
	if db == nil {
		return nil, errors.New("new signature verifier: want the database of its replay windows")
	}
	if now == nil {
		now = time.Now
	}
	return &signVerifier{secret: bytes.Clone(secret), now: now, windows: newSignWindows(db), limit: signNonceCap, seen: map[string]bool{}}, nil
}

// verifyRequest reads r's body (at most maxBody bytes), verifies the
// request and puts the body back for the handler. A body over maxBody is
// refused with errSignBodyTooLarge.
func (v *signVerifier) verifyRequest(r *http.Request, maxBody int64) error {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return fmt.Errorf("verify signed request: read body: %w", err)
		}
		if int64(len(body)) > maxBody {
			return &signError{Check: errSignBodyTooLarge}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return v.verify(r, body)
}

// verify checks r, whose body is body: headers present and well formed,
// timestamp within signWindow of the verifier's clock, MAC equal
// (constant-time), the acted-on headers covered, and the counter (v2) or
// nonce (v1) not seen. Replay state is recorded only once the MAC matched.
func (v *signVerifier) verify(r *http.Request, body []byte) error {
	sig := r.Header.Get(signSignatureHeader)
	if sig == "" {
		return &signError{Check: errSignMissingHeader, Header: signSignatureHeader}
	}
	version, hexMAC, _ := strings.Cut(sig, "=")
	if version != "v1" && version != "v2" {
		return &signError{Check: errSignMalformed, Header: signSignatureHeader}
	}
	idHeader := signNonceHeader // v1: the nonce
	if version == "v2" {
		idHeader = signSenderHeader
	}
	ts, id, counter := r.Header.Get(signTimestampHeader), r.Header.Get(idHeader), r.Header.Get(signCounterHeader)
	required := [][2]string{{signTimestampHeader, ts}, {idHeader, id}}
	if version == "v2" {
		required = append(required, [2]string{signCounterHeader, counter})
	}
	for _, h := range required {
		if h[1] == "" {
			return &signError{Check: errSignMissingHeader, Header: h[0]}
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(ts) > 12 || ts[0] == '+' || ts[0] == '-' {
		return &signError{Check: errSignMalformed, Header: signTimestampHeader}
	}
	if !signIDValid(id) {
		return &signError{Check: errSignMalformed, Header: idHeader}
	}
	got, err := hex.DecodeString(hexMAC)
	if err != nil || len(got) != sha256.Size {
		return &signError{Check: errSignMalformed, Header: signSignatureHeader}
	}
	var n uint64
	var signed []string
	if version == "v2" {
		if n, err = strconv.ParseUint(counter, 10, 64); err != nil || n == 0 || n > math.MaxInt64 || counter[0] == '+' {
			return &signError{Check: errSignMalformed, Header: signCounterHeader}
		}
		if signed, err = signCoveredHeaders(r); err != nil {
			return err
		}
	} else {
		for _, h := range signActedHeaders {
			if _, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
				return &signError{Check: errSignUnsignedHeader, Header: h}
			}
		}
	}
	now, signedAt := v.now(), time.Unix(secs, 0)
	if d := now.Sub(signedAt); d > signWindow || d < -signWindow {
		return &signError{Check: errSignClockSkew, Header: signTimestampHeader, Signed: signedAt, Now: now}
	}
	var want []byte
	if version == "v2" {
		want = signMACv2(v.secret, id, counter, ts, r, body, signed)
	} else {
		want = signMAC(v.secret, ts, id, r.Method, signRequestTarget(r), body)
	}
	if !hmac.Equal(got, want) {
		return &signError{Check: errSignMismatch, Header: signSignatureHeader}
	}
	if version == "v2" {
		return v.windows.accept(r.Context(), id, n, signedAt, now)
	}
	return v.remember(id, signedAt.Add(signWindow), now)
}

// signCoveredHeaders reads r's x-svc-signed-headers: a comma-separated
// list of signActedHeaders, each once, which must name every one of them r
// carries, each with one value.
func signCoveredHeaders(r *http.Request) ([]string, error) {
	var signed []string
	if list := r.Header.Get(signSignedHeadersHeader); list != "" {
		signed = strings.Split(list, ",")
	}
	for i, h := range signed {
		if !slices.Contains(signActedHeaders, h) || slices.Contains(signed[:i], h) {
			return nil, &signError{Check: errSignMalformed, Header: signSignedHeadersHeader}
		}
	}
	for _, h := range signActedHeaders {
		values, ok := r.Header[http.CanonicalHeaderKey(h)]
		if ok && !slices.Contains(signed, h) {
			return nil, &signError{Check: errSignUnsignedHeader, Header: h}
		}
		if len(values) > 1 {
			return nil, &signError{Check: errSignMalformed, Header: h}
		}
	}
	return signed, nil
}

// remember records a v1 nonce until expires, first dropping the expired
// ones; a nonce already held is refused, and so is any nonce at the cap.
func (v *signVerifier) remember(nonce string, expires, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.expiry) > 0 && !v.expiry[0].expires.After(now) {
		delete(v.seen, heap.Pop(&v.expiry).(signNonce).nonce)
	}
	if v.seen[nonce] {
		return &signError{Check: errSignReusedNonce, Header: signNonceHeader}
	}
	if len(v.seen) >= v.limit {
		return &signError{Check: errSignCapacity}
	}
	v.seen[nonce] = true
	heap.Push(&v.expiry, signNonce{nonce: nonce, expires: expires})
	return nil
}

// signNonce is a remembered nonce and when it may be forgotten.
type signNonce struct {
	nonce   string
	expires time.Time
}

// signNonceHeap is a container/heap of nonces, soonest expiry first.
type signNonceHeap []signNonce

func (h signNonceHeap) Len() int           { return len(h) }
func (h signNonceHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h signNonceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *signNonceHeap) Push(x any)        { *h = append(*h, x.(signNonce)) }
func (h *signNonceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
