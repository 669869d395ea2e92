package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// signTestSecret is the secret of the signing tests.
var signTestSecret = []byte("0123456789abcdef0123456789abcdef")

// testSender signs the requests the tests send boxes, as a control plane
// process does.
var testSender = newSignSender(1)

// signTestDB returns a fresh database with the platform migrations applied
// (the box's, where the replay windows live), and its pool.
func signTestDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	u := testPostgresURL(t)
	if _, err := applyMigrations(context.Background(), u, t.TempDir(), io.Discard); err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return u, db
}

// signTestRequest returns a server-side request of method and target with
// body, signed by s with secret at signedAt, carrying principal (none when
// "").
func signTestRequest(s *signSender, method, target, principal string, body, secret []byte, signedAt time.Time) *http.Request {
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	if principal != "" {
		r.Header.Set(signPrincipalHeader, principal)
	}
	s.sign(r, body, secret, signedAt)
	return r
}

// signTestV1 signs req the way control planes before v2 did.
func signTestV1(req *http.Request, body, secret []byte, signedAt time.Time) {
	ts, nonce := strconv.FormatInt(signedAt.Unix(), 10), rand.Text()
	req.Header.Set(signTimestampHeader, ts)
	req.Header.Set(signNonceHeader, nonce)
	req.Header.Set(signSignatureHeader, signV1Prefix+hex.EncodeToString(signMAC(secret, ts, nonce, req.Method, signRequestTarget(req), body)))
}

// TestSignVerify refuses every tampering with the check that failed, and
// never names the secret.
func TestSignVerify(t *testing.T) {
	_, db := signTestDB(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"input":1}`)
	sign := func(method, target string, body []byte, at time.Time) *http.Request {
		return signTestRequest(testSender, method, target, "cp-user:alice", body, signTestSecret, at)
	}
	// withHeader and getWithHeader sign a request, then set a header;
	// without signs one, then deletes a header.
	withHeader := func(name, value string) func() *http.Request {
		return func() *http.Request {
			r := sign("POST", "/api/x", body, now)
			r.Header.Set(name, value)
			return r
		}
	}
	getWithHeader := func(name, value string) func() *http.Request {
		return func() *http.Request {
			r := sign("GET", "/a", nil, now)
			r.Header.Set(name, value)
			return r
		}
	}
	without := func(name string) func() *http.Request {
		return func() *http.Request {
			r := sign("GET", "/a", nil, now)
			r.Header.Del(name)
			return r
		}
	}
	v1 := func(principal string) *http.Request {
		r := httptest.NewRequest("GET", "/a", nil)
		if principal != "" {
			r.Header.Set(signPrincipalHeader, principal)
		}
		signTestV1(r, nil, signTestSecret, now)
		return r
	}
	tests := []struct {
		name   string
		req    func() *http.Request
		body   []byte // the body the box received
		want   error
		header string
	}{
		{"valid", func() *http.Request { return sign("POST", "/api/x?a=1", body, now) }, body, nil, ""},
		{"valid, empty body", func() *http.Request { return sign("GET", "/api/x", nil, now) }, nil, nil, ""},
		{"valid, no principal", func() *http.Request {
			return signTestRequest(testSender, "GET", "/a", "", nil, signTestSecret, now)
		}, nil, nil, ""},
		{"valid at the window's edge", func() *http.Request { return sign("GET", "/a", nil, now.Add(-signWindow)) }, nil, nil, ""},
		{"v1 without a principal", func() *http.Request { return v1("") }, nil, nil, ""},
		{"v1 with a principal it does not cover", func() *http.Request { return v1("cp-user:alice") }, nil, errSignUnsignedHeader, signPrincipalHeader},
		{"tampered body", func() *http.Request { return sign("POST", "/api/x?a=1", body, now) }, []byte(`{"input":2}`), errSignMismatch, signSignatureHeader},
		{"tampered path", func() *http.Request {
			r := sign("POST", "/api/x?a=1", body, now)
			r.RequestURI = "/api/y?a=1"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered query", func() *http.Request {
			r := sign("POST", "/api/x?a=1", body, now)
			r.RequestURI = "/api/x?a=2"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered method", func() *http.Request {
			r := sign("POST", "/api/x?a=1", body, now)
			r.Method = "PUT"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered timestamp", withHeader(signTimestampHeader, "1800000001"), body, errSignMismatch, signSignatureHeader},
		{"tampered counter", withHeader(signCounterHeader, "999999999"), body, errSignMismatch, signSignatureHeader},
		{"tampered sender", withHeader(signSenderHeader, "another-sender-id-0123"), body, errSignMismatch, signSignatureHeader},
		{"re-pointed principal", withHeader(signPrincipalHeader, "cp-user:bob"), body, errSignMismatch, signSignatureHeader},
		{"principal dropped from the signed headers", withHeader(signSignedHeadersHeader, ""), body, errSignUnsignedHeader, signPrincipalHeader},
		{"principal added to a request signed without one", func() *http.Request {
			r := signTestRequest(testSender, "POST", "/api/x", "", body, signTestSecret, now)
			r.Header.Set(signPrincipalHeader, "cp-user:bob")
			return r
		}, body, errSignUnsignedHeader, signPrincipalHeader},
		{"a second principal", func() *http.Request {
			r := sign("POST", "/api/x", body, now)
			r.Header.Add(signPrincipalHeader, "cp-user:bob")
			return r
		}, body, errSignMalformed, signPrincipalHeader},
		{"unknown signed header", withHeader(signSignedHeadersHeader, signPrincipalHeader+",x-other"), body, errSignMalformed, signSignedHeadersHeader},
		{"wrong secret", func() *http.Request {
			return signTestRequest(testSender, "POST", "/api/x", "", body, []byte("another-secret-of-32-bytes-long!"), now)
		}, body, errSignMismatch, signSignatureHeader},
		{"signer clock behind", func() *http.Request { return sign("GET", "/a", nil, now.Add(-signWindow-time.Second)) }, nil, errSignClockSkew, signTimestampHeader},
		{"signer clock ahead", func() *http.Request { return sign("GET", "/a", nil, now.Add(signWindow+time.Second)) }, nil, errSignClockSkew, signTimestampHeader},
		{"missing timestamp", without(signTimestampHeader), nil, errSignMissingHeader, signTimestampHeader},
		{"missing counter", without(signCounterHeader), nil, errSignMissingHeader, signCounterHeader},
		{"missing sender", without(signSenderHeader), nil, errSignMissingHeader, signSenderHeader},
		{"missing nonce (v1)", func() *http.Request {
			r := v1("")
			r.Header.Del(signNonceHeader)
			return r
		}, nil, errSignMissingHeader, signNonceHeader},
		{"missing signature", func() *http.Request { return httptest.NewRequest("GET", "/a", nil) }, nil, errSignMissingHeader, signSignatureHeader},
		{"signature of another version", func() *http.Request {
			r := sign("GET", "/a", nil, now)
			r.Header.Set(signSignatureHeader, "v3="+strings.TrimPrefix(r.Header.Get(signSignatureHeader), "v2="))
			return r
		}, nil, errSignMalformed, signSignatureHeader},
		{"counter zero", getWithHeader(signCounterHeader, "0"), nil, errSignMalformed, signCounterHeader},
		{"nonce with a dot (v1)", func() *http.Request {
			r := v1("")
			r.Header.Set(signNonceHeader, "abcdefghijklmnop.GET")
			return r
		}, nil, errSignMalformed, signNonceHeader},
		{"signed timestamp", getWithHeader(signTimestampHeader, "+1800000000"), nil, errSignMalformed, signTimestampHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := newSignVerifier(signTestSecret, db, func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			err = v.verify(tt.req(), tt.body)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("verify = %v; want %v", err, tt.want)
			}
			if err == nil {
				return
			}
			var se *signError
			if !errors.As(err, &se) || se.Header != tt.header {
				t.Errorf("verify = %#v; want a *signError naming %q", err, tt.header)
			}
			if strings.Contains(err.Error(), string(signTestSecret)) {
				t.Errorf("the refusal names the secret: %v", err)
			}
		})
	}
}

// TestSignSkewNamesBothClocks checks the skew refusal says both clocks.
func TestSignSkewNamesBothClocks(t *testing.T) {
	_, db := signTestDB(t)
	now := time.Unix(1_800_000_000, 0)
	v, _ := newSignVerifier(signTestSecret, db, func() time.Time { return now })
	err := v.verify(signTestRequest(testSender, "GET", "/a", "", nil, signTestSecret, now.Add(-time.Hour)), nil)
	for _, want := range []string{"clock skew", "unix 1799996400", "unix 1800000000", "1h0m0s apart"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("verify = %v; want it to say %q", err, want)
		}
	}
}

// TestSignNonce (v1) refuses a replayed nonce within the window, forgets
// nonces once their window passed, and at the cap refuses for capacity
// (not forgets, and not as a signature mismatch).
func TestSignNonce(t *testing.T) {
	_, db := signTestDB(t)
	now := time.Unix(1_800_000_000, 0)
	clock := now
	v, _ := newSignVerifier(signTestSecret, db, func() time.Time { return clock })
	v1 := func(target string, at time.Time) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		signTestV1(r, nil, signTestSecret, at)
		return r
	}
	r := v1("/x", now)
	if err := v.verify(r, nil); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(signWindow - time.Second)
	if err := v.verify(r, nil); !errors.Is(err, errSignReusedNonce) {
		t.Fatalf("replay = %v; want %v", err, errSignReusedNonce)
	}
	clock = now.Add(signWindow + time.Second) // the replay is now a skew, and the nonce is forgotten
	if err := v.verify(r, nil); !errors.Is(err, errSignClockSkew) {
		t.Fatalf("late replay = %v; want %v", err, errSignClockSkew)
	}
	if v.verify(v1("/y", clock), nil) != nil || len(v.seen) != 1 {
		t.Fatalf("expired nonces kept: %d remembered", len(v.seen))
	}

	v.limit = 2
	if err := v.verify(v1("/z", clock), nil); err != nil {
		t.Fatal(err)
	}
	err := v.verify(v1("/z", clock), nil)
	if !errors.Is(err, errSignCapacity) || signCheckName(err) != "capacity" {
		t.Fatalf("at the cap = %v (check %q); want %v, check capacity", err, signCheckName(err), errSignCapacity)
	}
}

// TestSignFloodKeepsLegitimate is the attack of issue 18 item 1 at the
// verifier, with the v1 nonce cap lowered to 50: a flood of 10 times that
// many signed requests (each proxied chat request of an API key is one)
// leaves the control plane's next request, the secret proof of link,
// accepted, because v2 keeps a window per sender, not a set per request.
func TestSignFloodKeepsLegitimate(t *testing.T) {
	_, db := signTestDB(t)
	v, _ := newSignVerifier(signTestSecret, db, nil)
	v.limit = 50
	cp := newSignSender(1)
	body := []byte(`{"messages":"not a list"}`)
	for i := range 10 * v.limit {
		r := signTestRequest(cp, "POST", "/openai/v1/chat/completions", "cp-key:k1", body, signTestSecret, time.Now())
		if err := v.verify(r, body); err != nil {
			t.Fatalf("flood request %d: %v", i, err)
		}
	}
	challenge := []byte(`{"challenge":"c"}`)
	if err := v.verify(signTestRequest(cp, "POST", boxWellKnown+"/challenge", "", challenge, signTestSecret, time.Now()), challenge); err != nil {
		t.Fatalf("the legitimate request after the flood: %v", err)
	}
	var senders, bits int
	db.QueryRow(context.Background(), `SELECT count(*), sum(length(seen)) FROM svc.sign_senders`).Scan(&senders, &bits)
	if senders != 1 || bits != signWindowBits {
		t.Errorf("after %d requests the box keeps %d senders in %d bits; want one window of %d bits", 10*v.limit+1, senders, bits, signWindowBits)
	}
}

// TestSignCounterWindow checks the sliding window: a counter is accepted
// once, also out of order within the window, refused below it, refused
// again by a new verifier on the same database (a restarted box, or
// another replica), and a new sender past the cap is refused for capacity
// until the idle senders' window passed.
func TestSignCounterWindow(t *testing.T) {
	_, db := signTestDB(t)
	now := time.Unix(1_800_000_000, 0)
	clock := now
	v, _ := newSignVerifier(signTestSecret, db, func() time.Time { return clock })
	s := newSignSender(1)
	req := func() *http.Request { return signTestRequest(s, "GET", "/a", "", nil, signTestSecret, now) }
	first, second := req(), req()
	if err := v.verify(second, nil); err != nil {
		t.Fatal(err)
	}
	if err := v.verify(first, nil); err != nil {
		t.Fatalf("a request overtaken by the next one = %v; want accepted", err)
	}
	for _, r := range []*http.Request{first, second} {
		if err := v.verify(r, nil); !errors.Is(err, errSignReplayed) || signCheckName(err) != "replayed" {
			t.Errorf("replay of counter %s = %v; want %v", r.Header.Get(signCounterHeader), err, errSignReplayed)
		}
	}
	overtaken := req()
	s.lanes[0].counter.Add(signWindowBits)
	latest := req()
	if err := v.verify(latest, nil); err != nil {
		t.Fatal(err)
	}
	if err := v.verify(overtaken, nil); !errors.Is(err, errSignStale) {
		t.Errorf("a counter below the window = %v; want %v", err, errSignStale)
	}
	restarted, _ := newSignVerifier(signTestSecret, db, func() time.Time { return clock })
	if err := restarted.verify(latest, nil); !errors.Is(err, errSignReplayed) {
		t.Errorf("replay to a new verifier on the same database = %v; want %v", err, errSignReplayed)
	}

	restarted.windows.maxSenders = 2
	if err := restarted.verify(signTestRequest(newSignSender(1), "GET", "/a", "", nil, signTestSecret, now), nil); err != nil {
		t.Fatalf("a second sender: %v", err)
	}
	err := restarted.verify(signTestRequest(newSignSender(1), "GET", "/a", "", nil, signTestSecret, now), nil)
	if !errors.Is(err, errSignCapacity) || signCheckName(err) != "capacity" {
		t.Fatalf("a third sender over a cap of 2 = %v; want %v", err, errSignCapacity)
	}
	clock = now.Add(signWindow + time.Second)
	if err := restarted.verify(signTestRequest(newSignSender(1), "GET", "/a", "", nil, signTestSecret, clock), nil); err != nil {
		t.Fatalf("a new sender once the others are a window idle: %v", err)
	}
}

// TestSignCounterRace sends each of 40 signed requests of one sender 5
// times at once, from 20 goroutines, out of order: every counter is
// accepted exactly once and every other copy is refused as replayed, so
// the window's one-statement decision (0011_sign_accept_update.sql) holds
// when requests wait for each other's lock on the sender's row.
func TestSignCounterRace(t *testing.T) {
	_, db := signTestDB(t)
	v, _ := newSignVerifier(signTestSecret, db, nil)
	s := newSignSender(1)
	const requests, copies = 40, 5
	var reqs []*http.Request
	for range requests {
		reqs = append(reqs, signTestRequest(s, "GET", "/a", "", nil, signTestSecret, time.Now()))
	}
	work := make(chan *http.Request, requests*copies)
	for c := range copies {
		for i := range requests {
			if c%2 == 1 {
				i = requests - 1 - i
			}
			work <- reqs[i]
		}
	}
	close(work)
	var mu sync.Mutex
	accepted := map[string]int{}
	var others []error
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for r := range work {
				err := v.verify(r, nil)
				mu.Lock()
				switch {
				case err == nil:
					accepted[r.Header.Get(signCounterHeader)]++
				case !errors.Is(err, errSignReplayed):
					others = append(others, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("%d copies refused other than as replayed, first: %v", len(others), others[0])
	}
	for _, r := range reqs {
		if n := accepted[r.Header.Get(signCounterHeader)]; n != 1 {
			t.Errorf("counter %s accepted %d times of %d copies; want once", r.Header.Get(signCounterHeader), n, copies)
		}
	}
}

// TestSignVerifyRequest signs through a real client and verifies on a real
// server, body included; a body over the limit is refused.
func TestSignVerifyRequest(t *testing.T) {
	_, db := signTestDB(t)
	v, _ := newSignVerifier(signTestSecret, db, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := v.verifyRequest(r, 16); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, tt := range []struct {
		body string
		want int
	}{{"small", 200}, {"a body longer than sixteen bytes", 401}} {
		req, _ := http.NewRequest("POST", srv.URL+"/p%20q/r?x=1&y=%2F", strings.NewReader(tt.body))
		req.Header.Set(signPrincipalHeader, "cp-user:alice")
		testSender.sign(req, []byte(tt.body), signTestSecret, time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %q = %d; want %d", tt.body, resp.StatusCode, tt.want)
		}
	}
	if _, err := newSignVerifier([]byte("short"), db, nil); !errors.Is(err, errSignSecretTooShort) {
		t.Errorf("newSignVerifier(short) = %v; want %v", err, errSignSecretTooShort)
	}
}

// BenchmarkVerifySignature is the box's cost of verifying one signed
// request with a 1 KiB body, its window's durable update in PostgreSQL
// included: one request at a time, then 16 at once from one sender of
// one lane and of cpSignLanes lanes.
func BenchmarkVerifySignature(b *testing.B) {
	_, db := signTestDB(b)
	body := bytes.Repeat([]byte("x"), 1024)
	v, _ := newSignVerifier(signTestSecret, db, nil)
	verify := func(b *testing.B, s *signSender) {
		r := signTestRequest(s, "POST", "/api/workflows/greet/start", "cp-user:u", body, signTestSecret, time.Now())
		if err := v.verify(r, body); err != nil {
			b.Error(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		s := newSignSender(1)
		for range b.N {
			verify(b, s)
		}
	})
	for _, lanes := range []int{1, cpSignLanes} {
		b.Run(fmt.Sprintf("parallel16/lanes=%d", lanes), func(b *testing.B) {
			s := newSignSender(lanes)
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					verify(b, s)
				}
			})
		})
	}
}
