package main

// Request signing between the control plane and a box (DESIGN §7, SPEC §5
// "Box signing and identity"). The control plane signs every request it
// sends a box with the deployment's shared secret (signRequest); the box
// verifies it (signVerifier). A request carries three headers:
//
//	x-svc-timestamp: unix seconds when it was signed
//	x-svc-nonce:     16–128 characters of [A-Za-z0-9_-], never reused
//	x-svc-signature: v1=<hex HMAC-SHA256>
//
// The MAC covers "timestamp.nonce.METHOD.target.hex(sha256(body))", where
// target is the request target as sent on the wire: the escaped path, plus
// "?" and the raw query when there is one. The nonce alphabet has no ".",
// so the fields cannot shift into one another.

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
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names and limits of request signing.
const (
	signTimestampHeader = "x-svc-timestamp"
	signNonceHeader     = "x-svc-nonce"
	signSignatureHeader = "x-svc-signature"
	// signPrincipalHeader names, on a signed request the control plane
	// proxies, the caller it acts for (cp-user:<id> or cp-key:<id>); a box
	// honours it only on a request whose signature verified.
	signPrincipalHeader = "x-svc-principal"
	// signVersionPrefix starts the signature header's value; a later scheme
	// gets a new prefix.
	signVersionPrefix = "v1="
	// signWindow is how far the signer's clock may be from the box's, either
	// way; a nonce is remembered for as long as its request could be valid.
	signWindow = 5 * time.Minute
	// signNonceCap bounds the nonces a verifier remembers. Only requests
	// with a valid signature reach the set, so only a holder of the secret
	// can fill it: that takes more than signNonceCap signed requests within
	// the 10 minutes a nonce is kept (≈330 a second, sustained). At the cap
	// the verifier refuses new requests (errSignNonceCapacity) until entries
	// expire: forgetting a live nonce would reopen replay.
	signNonceCap = 200_000
	// signMinSecret is the shortest secret a verifier accepts, in bytes.
	signMinSecret = 16
)

// The checks a signed request can fail. A *signError wraps exactly one.
var (
	errSignMissingHeader  = errors.New("missing signature header")
	errSignMalformed      = errors.New("malformed signature header")
	errSignClockSkew      = errors.New("clock skew beyond the signing window")
	errSignMismatch       = errors.New("signature mismatch")
	errSignReusedNonce    = errors.New("reused nonce")
	errSignNonceCapacity  = errors.New("too many signed requests in the signing window")
	errSignBodyTooLarge   = errors.New("signed request body too large")
	errSignSecretTooShort = errors.New("signing secret too short")
)

// signNonceForeign reports whether r is outside the nonce alphabet [A-Za-z0-9_-].
func signNonceForeign(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
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

// signMAC is HMAC-SHA256(secret, "timestamp.nonce.METHOD.target.hex(sha256(body))").
func signMAC(secret []byte, timestamp, nonce, method, target string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, timestamp+"."+nonce+"."+method+"."+target+".")
	io.WriteString(m, hex.EncodeToString(sum[:]))
	return m.Sum(nil)
}

// signRequest signs req, whose body is body (the caller sets req.Body), with
// secret at now: it sets the timestamp, a fresh random nonce and the
// signature headers.
func signRequest(req *http.Request, body, secret []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := rand.Text() // 26 base32 characters, 130 bits
	mac := signMAC(secret, ts, nonce, req.Method, signRequestTarget(req), body)
	req.Header.Set(signTimestampHeader, ts)
	req.Header.Set(signNonceHeader, nonce)
	req.Header.Set(signSignatureHeader, signVersionPrefix+hex.EncodeToString(mac))
}

// signVerifier checks signed requests against one secret and remembers
// their nonces for the signing window. Safe for concurrent use.
type signVerifier struct {
	secret []byte
	now    func() time.Time
	limit  int // signNonceCap; tests lower it

	mu     sync.Mutex
	seen   map[string]bool
	expiry signNonceHeap // the nonces of seen, soonest expiry first
}

// newSignVerifier returns a verifier of secret (at least signMinSecret
// bytes); now is its clock (nil: time.Now).
func newSignVerifier(secret []byte, now func() time.Time) (*signVerifier, error) {
	if len(secret) < signMinSecret {
		return nil, fmt.Errorf("new signature verifier: %w: want at least %d bytes", errSignSecretTooShort, signMinSecret)
	}
	if now == nil {
		now = time.Now
	}
	return &signVerifier{secret: bytes.Clone(secret), now: now, limit: signNonceCap, seen: map[string]bool{}}, nil
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
// (constant-time), nonce not seen within the window. The nonce is recorded
// only once the MAC matched.
func (v *signVerifier) verify(r *http.Request, body []byte) error {
	ts, nonce, sig := r.Header.Get(signTimestampHeader), r.Header.Get(signNonceHeader), r.Header.Get(signSignatureHeader)
	for _, h := range [...][2]string{{signTimestampHeader, ts}, {signNonceHeader, nonce}, {signSignatureHeader, sig}} {
		if h[1] == "" {
			return &signError{Check: errSignMissingHeader, Header: h[0]}
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(ts) > 12 || ts[0] == '+' || ts[0] == '-' {
		return &signError{Check: errSignMalformed, Header: signTimestampHeader}
	}
	if len(nonce) < 16 || len(nonce) > 128 || strings.IndexFunc(nonce, signNonceForeign) >= 0 {
		return &signError{Check: errSignMalformed, Header: signNonceHeader}
	}
	got, err := hex.DecodeString(strings.TrimPrefix(sig, signVersionPrefix))
	if !strings.HasPrefix(sig, signVersionPrefix) || err != nil || len(got) != sha256.Size {
		return &signError{Check: errSignMalformed, Header: signSignatureHeader}
	}
	now, signed := v.now(), time.Unix(secs, 0)
	if d := now.Sub(signed); d > signWindow || d < -signWindow {
		return &signError{Check: errSignClockSkew, Header: signTimestampHeader, Signed: signed, Now: now}
	}
	if !hmac.Equal(got, signMAC(v.secret, ts, nonce, r.Method, signRequestTarget(r), body)) {
		return &signError{Check: errSignMismatch, Header: signSignatureHeader}
	}
	return v.remember(nonce, signed.Add(signWindow), now)
}

// remember records nonce until expires, first dropping the expired ones; a
// nonce already held is refused, and so is any nonce at the cap.
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
		return &signError{Check: errSignNonceCapacity}
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
