package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// signTestSecret is the secret of the signing tests.
var signTestSecret = []byte("0123456789abcdef0123456789abcdef")

// signTestRequest returns a server-side request of method and target with
// body, signed with secret at signedAt.
func signTestRequest(method, target string, body, secret []byte, signedAt time.Time) *http.Request {
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	signRequest(r, body, secret, signedAt)
	return r
}

// TestSignVerify refuses every tampering with the check that failed, and
// never names the secret.
func TestSignVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"input":1}`)
	tests := []struct {
		name   string
		req    func() *http.Request
		body   []byte // the body the box received
		want   error
		header string
	}{
		{"valid", func() *http.Request { return signTestRequest("POST", "/api/x?a=1", body, signTestSecret, now) }, body, nil, ""},
		{"valid, empty body", func() *http.Request { return signTestRequest("GET", "/api/x", nil, signTestSecret, now) }, nil, nil, ""},
		{"valid at the window's edge", func() *http.Request { return signTestRequest("GET", "/a", nil, signTestSecret, now.Add(-signWindow)) }, nil, nil, ""},
		{"tampered body", func() *http.Request { return signTestRequest("POST", "/api/x?a=1", body, signTestSecret, now) }, []byte(`{"input":2}`), errSignMismatch, signSignatureHeader},
		{"tampered path", func() *http.Request {
			r := signTestRequest("POST", "/api/x?a=1", body, signTestSecret, now)
			r.RequestURI = "/api/y?a=1"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered query", func() *http.Request {
			r := signTestRequest("POST", "/api/x?a=1", body, signTestSecret, now)
			r.RequestURI = "/api/x?a=2"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered method", func() *http.Request {
			r := signTestRequest("POST", "/api/x?a=1", body, signTestSecret, now)
			r.Method = "PUT"
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"tampered timestamp", func() *http.Request {
			r := signTestRequest("POST", "/api/x", body, signTestSecret, now)
			r.Header.Set(signTimestampHeader, "1800000001")
			return r
		}, body, errSignMismatch, signSignatureHeader},
		{"wrong secret", func() *http.Request {
			return signTestRequest("POST", "/api/x", body, []byte("another-secret-of-32-bytes-long!"), now)
		}, body, errSignMismatch, signSignatureHeader},
		{"signer clock behind", func() *http.Request {
			return signTestRequest("GET", "/a", nil, signTestSecret, now.Add(-signWindow-time.Second))
		}, nil, errSignClockSkew, signTimestampHeader},
		{"signer clock ahead", func() *http.Request {
			return signTestRequest("GET", "/a", nil, signTestSecret, now.Add(signWindow+time.Second))
		}, nil, errSignClockSkew, signTimestampHeader},
		{"missing timestamp", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Del(signTimestampHeader)
			return r
		}, nil, errSignMissingHeader, signTimestampHeader},
		{"missing nonce", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Del(signNonceHeader)
			return r
		}, nil, errSignMissingHeader, signNonceHeader},
		{"missing signature", func() *http.Request { return httptest.NewRequest("GET", "/a", nil) }, nil, errSignMissingHeader, signTimestampHeader},
		{"unsigned but timestamped", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Del(signSignatureHeader)
			return r
		}, nil, errSignMissingHeader, signSignatureHeader},
		{"signature of another version", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Set(signSignatureHeader, "v2="+strings.TrimPrefix(r.Header.Get(signSignatureHeader), "v1="))
			return r
		}, nil, errSignMalformed, signSignatureHeader},
		{"nonce with a dot", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Set(signNonceHeader, "abcdefghijklmnop.GET")
			return r
		}, nil, errSignMalformed, signNonceHeader},
		{"signed timestamp", func() *http.Request {
			r := signTestRequest("GET", "/a", nil, signTestSecret, now)
			r.Header.Set(signTimestampHeader, "+1800000000")
			return r
		}, nil, errSignMalformed, signTimestampHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := newSignVerifier(signTestSecret, func() time.Time { return now })
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
	now := time.Unix(1_800_000_000, 0)
	v, _ := newSignVerifier(signTestSecret, func() time.Time { return now })
	err := v.verify(signTestRequest("GET", "/a", nil, signTestSecret, now.Add(-time.Hour)), nil)
	for _, want := range []string{"clock skew", "unix 1799996400", "unix 1800000000", "1h0m0s apart"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("verify = %v; want it to say %q", err, want)
		}
	}
}

// TestSignNonce refuses a replayed nonce within the window, forgets nonces
// once their window passed, and refuses (not forgets) at the cap.
func TestSignNonce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := now
	v, _ := newSignVerifier(signTestSecret, func() time.Time { return clock })
	r := signTestRequest("POST", "/x", []byte("b"), signTestSecret, now)
	if err := v.verify(r, []byte("b")); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(signWindow - time.Second)
	if err := v.verify(r, []byte("b")); !errors.Is(err, errSignReusedNonce) {
		t.Fatalf("replay = %v; want %v", err, errSignReusedNonce)
	}
	clock = now.Add(signWindow + time.Second) // the replay is now a skew, and the nonce is forgotten
	if err := v.verify(r, []byte("b")); !errors.Is(err, errSignClockSkew) {
		t.Fatalf("late replay = %v; want %v", err, errSignClockSkew)
	}
	if fresh := signTestRequest("GET", "/y", nil, signTestSecret, clock); v.verify(fresh, nil) != nil || len(v.seen) != 1 {
		t.Fatalf("expired nonces kept: %d remembered", len(v.seen))
	}

	v.limit = 2
	if err := v.verify(signTestRequest("GET", "/z", nil, signTestSecret, clock), nil); err != nil {
		t.Fatal(err)
	}
	if err := v.verify(signTestRequest("GET", "/z", nil, signTestSecret, clock), nil); !errors.Is(err, errSignNonceCapacity) {
		t.Fatalf("at the cap = %v; want %v", err, errSignNonceCapacity)
	}
}

// TestSignVerifyRequest signs through a real client and verifies on a real
// server, body included; a body over the limit is refused.
func TestSignVerifyRequest(t *testing.T) {
	v, _ := newSignVerifier(signTestSecret, nil)
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
		signRequest(req, []byte(tt.body), signTestSecret, time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %q = %d; want %d", tt.body, resp.StatusCode, tt.want)
		}
	}
	if _, err := newSignVerifier([]byte("short"), nil); !errors.Is(err, errSignSecretTooShort) {
		t.Errorf("newSignVerifier(short) = %v; want %v", err, errSignSecretTooShort)
	}
}

// BenchmarkVerifySignature is the box's cost of verifying one signed
// request with a 1 KiB body (each iteration a fresh nonce).
func BenchmarkVerifySignature(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	v, _ := newSignVerifier(signTestSecret, nil)
	v.limit = b.N + 1
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		reqs[i] = signTestRequest("POST", "/api/workflows/greet/start", body, signTestSecret, time.Now())
	}
	b.ResetTimer()
	for i := range b.N {
		if err := v.verify(reqs[i], body); err != nil {
			b.Fatal(err)
		}
	}
}
