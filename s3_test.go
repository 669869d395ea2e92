package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Credentials of the test servers.
const (
	s3TestAccessKey = "AKIDSVCTEST"
	s3TestSecretKey = "svc-test-secret/with+symbols"
	s3TestRegion    = "eu-test-1"
)

// s3TestEnv is an S3 server on a loopback port, storing under a temporary directory.
type s3TestEnv struct {
	server *s3Server
	http   *httptest.Server
	root   string
}

// s3TestLogWriter sends the server's log lines to the test log.
type s3TestLogWriter struct{ t *testing.T }

// Write logs p.
func (w s3TestLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newS3TestEnv starts a server on 127.0.0.1 with a bucket named "bucket".
func newS3TestEnv(t *testing.T) *s3TestEnv {
	t.Helper()
	root := filepath.Join(t.TempDir(), "s3")
	s, err := newS3Server(root, s3TestAccessKey, s3TestSecretKey)
	if err != nil {
		t.Fatalf("newS3Server: %v", err)
	}
	s.logger = slog.New(slog.NewTextHandler(s3TestLogWriter{t}, nil))
	if err := s.ensureBucket("bucket"); err != nil {
		t.Fatalf("ensureBucket: %v", err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return &s3TestEnv{server: s, http: ts, root: root}
}

// s3TestEscape percent-encodes s for a SigV4 canonical URI or query (everything but
// A-Z a-z 0-9 - _ . ~, and '/' when keepSlash), independently of the server's encoder.
func s3TestEscape(s string, keepSlash bool) string {
	out := strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
	if keepSlash {
		out = strings.ReplaceAll(out, "%2F", "/")
	}
	return out
}

// s3TestKeyPath is the encoded path of a key in the test bucket.
func s3TestKeyPath(key string) string { return "/bucket/" + s3TestEscape(key, true) }

// s3TestHMAC returns HMAC-SHA256(key, data).
func s3TestHMAC(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, data)
	return m.Sum(nil)
}

// s3TestHash returns the hex SHA-256 of b.
func s3TestHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// s3TestSigning is what a signed request leaves for signing its chunks.
type s3TestSigning struct {
	key       []byte
	amzDate   string
	scope     string
	signature string
}

// s3TestSigningKey derives the SigV4 key for a day.
func s3TestSigningKey(secret, day string) []byte {
	k := s3TestHMAC([]byte("AWS4"+secret), day)
	k = s3TestHMAC(k, s3TestRegion)
	k = s3TestHMAC(k, "s3")
	return s3TestHMAC(k, "aws4_request")
}

// s3TestCanonicalQuery sorts an already encoded query for a canonical request.
func s3TestCanonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	params := strings.Split(raw, "&")
	for i, p := range params {
		if !strings.Contains(p, "=") {
			params[i] = p + "="
		}
	}
	sort.Strings(params)
	return strings.Join(params, "&")
}

// s3TestSign signs req with an Authorization header as an SDK does: host, content-length (when
// there is a body) and every x-amz-*, content-* and range header are signed.
func s3TestSign(req *http.Request, access, secret string, at time.Time, payload string) s3TestSigning {
	amzDate := at.UTC().Format("20060102T150405Z")
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payload)
	names := []string{"host"}
	if req.ContentLength > 0 {
		names = append(names, "content-length")
	}
	for name := range req.Header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "x-amz-") || strings.HasPrefix(lower, "content-") || lower == "range" {
			names = append(names, lower)
		}
	}
	sort.Strings(names)
	var headers strings.Builder
	for _, name := range names {
		value := strings.TrimSpace(req.Header.Get(name))
		switch name {
		case "host":
			value = req.URL.Host
		case "content-length":
			value = strconv.FormatInt(req.ContentLength, 10)
		}
		fmt.Fprintf(&headers, "%s:%s\n", name, value)
	}
	signed := strings.Join(names, ";")
	canonical := req.Method + "\n" + req.URL.EscapedPath() + "\n" + s3TestCanonicalQuery(req.URL.RawQuery) + "\n" +
		headers.String() + "\n" + signed + "\n" + payload
	scope := amzDate[:8] + "/" + s3TestRegion + "/s3/aws4_request"
	key := s3TestSigningKey(secret, amzDate[:8])
	sig := hex.EncodeToString(s3TestHMAC(key, "AWS4-HMAC-SHA256\n"+amzDate+"\n"+scope+"\n"+s3TestHash([]byte(canonical))))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+access+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
	return s3TestSigning{key: key, amzDate: amzDate, scope: scope, signature: sig}
}

// presign returns a presigned URL for method on path (encoded), valid for expires seconds
// from at.
func (e *s3TestEnv) presign(method, path string, at time.Time, expires int) string {
	u, _ := url.Parse(e.http.URL)
	amzDate := at.UTC().Format("20060102T150405Z")
	scope := amzDate[:8] + "/" + s3TestRegion + "/s3/aws4_request"
	query := "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + s3TestEscape(s3TestAccessKey+"/"+scope, false) +
		"&X-Amz-Date=" + amzDate + "&X-Amz-Expires=" + strconv.Itoa(expires) + "&X-Amz-SignedHeaders=host"
	canonical := method + "\n" + path + "\n" + query + "\nhost:" + u.Host + "\n\nhost\nUNSIGNED-PAYLOAD"
	key := s3TestSigningKey(s3TestSecretKey, amzDate[:8])
	sig := hex.EncodeToString(s3TestHMAC(key, "AWS4-HMAC-SHA256\n"+amzDate+"\n"+scope+"\n"+s3TestHash([]byte(canonical))))
	return e.http.URL + path + "?" + query + "&X-Amz-Signature=" + sig
}

// s3TestRequest describes one request to the test server.
type s3TestRequest struct {
	method  string
	path    string // encoded
	query   string // encoded
	header  map[string]string
	body    []byte
	payload string    // x-amz-content-sha256; "" means the hex SHA-256 of body
	secret  string    // "" means the server's
	access  string    // "" means the server's
	at      time.Time // zero means now
	anon    bool      // send without a signature
}

// s3TestResponse is a response with its body read.
type s3TestResponse struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and reads the whole response.
func (e *s3TestEnv) do(t *testing.T, r s3TestRequest) s3TestResponse {
	t.Helper()
	target := e.http.URL + r.path
	if r.query != "" {
		target += "?" + r.query
	}
	req, err := http.NewRequest(r.method, target, bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("new request %s %s: %v", r.method, target, err)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if !r.anon {
		payload, secret, access, at := r.payload, r.secret, r.access, r.at
		if payload == "" {
			payload = s3TestHash(r.body)
		}
		if secret == "" {
			secret = s3TestSecretKey
		}
		if access == "" {
			access = s3TestAccessKey
		}
		if at.IsZero() {
			at = time.Now()
		}
		s3TestSign(req, access, secret, at, payload)
	}
	return e.send(t, req)
}

// send sends a prepared request and reads the whole response.
func (e *s3TestEnv) send(t *testing.T, req *http.Request) s3TestResponse {
	t.Helper()
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return s3TestResponse{status: resp.StatusCode, header: resp.Header, body: body}
}

// put stores an object in the test bucket, failing the test unless it succeeds.
func (e *s3TestEnv) put(t *testing.T, key string, body []byte) {
	t.Helper()
	if resp := e.do(t, s3TestRequest{method: "PUT", path: s3TestKeyPath(key), body: body}); resp.status != http.StatusOK {
		t.Fatalf("put %q: status %d: %s", key, resp.status, resp.body)
	}
}

// wantStatus fails the test unless the response has status.
func (r s3TestResponse) wantStatus(t *testing.T, what string, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d; want %d (body %s)", what, r.status, status, r.body)
	}
}

// wantError fails the test unless the response is an S3 error document with status and code,
// naming the request id it was sent with.
func (r s3TestResponse) wantError(t *testing.T, what string, status int, code string) {
	t.Helper()
	r.wantStatus(t, what, status)
	var doc struct {
		Code      string
		Message   string
		Resource  string
		RequestID string `xml:"RequestId"`
	}
	if err := xml.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("%s: error body %q: %v", what, r.body, err)
	}
	if doc.Code != code || doc.Message == "" || doc.RequestID == "" || doc.RequestID != r.header.Get("x-amz-request-id") {
		t.Fatalf("%s: error %+v (request id header %q); want code %s", what, doc, r.header.Get("x-amz-request-id"), code)
	}
}

// s3TestMD5ETag returns the quoted hex MD5 of b.
func s3TestMD5ETag(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// TestS3Buckets checks bucket creation, listing, HeadBucket and deletion rules.
func TestS3Buckets(t *testing.T) {
	e := newS3TestEnv(t)
	e.do(t, s3TestRequest{method: "PUT", path: "/photos"}).wantStatus(t, "create bucket", http.StatusOK)
	e.do(t, s3TestRequest{method: "PUT", path: "/photos"}).wantError(t, "create existing bucket", http.StatusConflict, "BucketAlreadyOwnedByYou")
	if err := e.server.ensureBucket("photos"); err != nil {
		t.Fatalf("ensureBucket of an existing bucket: %v", err)
	}

	resp := e.do(t, s3TestRequest{method: "GET", path: "/"})
	resp.wantStatus(t, "list buckets", http.StatusOK)
	var list struct {
		Buckets []struct {
			Name         string
			CreationDate string
		} `xml:"Buckets>Bucket"`
	}
	if err := xml.Unmarshal(resp.body, &list); err != nil {
		t.Fatalf("list buckets: %v", err)
	}
	var names []string
	for _, b := range list.Buckets {
		if _, err := time.Parse(s3XMLTimeFormat, b.CreationDate); err != nil {
			t.Errorf("bucket %q creation date %q: %v", b.Name, b.CreationDate, err)
		}
		names = append(names, b.Name)
	}
	if want := []string{"bucket", "photos"}; !slices.Equal(names, want) {
		t.Errorf("buckets = %q; want %q", names, want)
	}

	e.do(t, s3TestRequest{method: "HEAD", path: "/photos"}).wantStatus(t, "head bucket", http.StatusOK)
	e.do(t, s3TestRequest{method: "HEAD", path: "/nothere"}).wantStatus(t, "head missing bucket", http.StatusNotFound)
	e.do(t, s3TestRequest{method: "GET", path: "/nothere", query: "list-type=2"}).wantError(t, "list missing bucket", http.StatusNotFound, "NoSuchBucket")
	e.do(t, s3TestRequest{method: "PUT", path: "/nothere/key", body: []byte("x")}).wantError(t, "put into missing bucket", http.StatusNotFound, "NoSuchBucket")

	e.do(t, s3TestRequest{method: "PUT", path: "/photos/a.jpg", body: []byte("jpeg")}).wantStatus(t, "put", http.StatusOK)
	e.do(t, s3TestRequest{method: "DELETE", path: "/photos"}).wantError(t, "delete non-empty bucket", http.StatusConflict, "BucketNotEmpty")
	e.do(t, s3TestRequest{method: "DELETE", path: "/photos/a.jpg"}).wantStatus(t, "delete object", http.StatusNoContent)
	e.do(t, s3TestRequest{method: "DELETE", path: "/photos"}).wantStatus(t, "delete empty bucket", http.StatusNoContent)
	e.do(t, s3TestRequest{method: "HEAD", path: "/photos"}).wantStatus(t, "head deleted bucket", http.StatusNotFound)
	e.do(t, s3TestRequest{method: "DELETE", path: "/photos"}).wantError(t, "delete deleted bucket", http.StatusNotFound, "NoSuchBucket")
	e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "analytics"}).wantError(t, "unsupported subresource", http.StatusNotImplemented, "NotImplemented")
	e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "location"}).wantStatus(t, "bucket location", http.StatusOK)
}

// TestS3BucketNames checks S3 bucket naming rules, including names of the server's own directories.
func TestS3BucketNames(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"abc", true},
		{"my-bucket.v2", true},
		{"ab", false},
		{strings.Repeat("a", 64), false},
		{"Upper", false},
		{"a..b", false},
		{"-abc", false},
		{"abc-", false},
		{".tmp", false},
		{".uploads", false},
		{"..", false},
		{"192.168.1.1", false},
		{"xn--abc", false},
		{"a_b", false},
		{"a/b", false},
	}
	for _, tt := range tests {
		if err := s3CheckBucketName(tt.name); (err == nil) != tt.ok {
			t.Errorf("s3CheckBucketName(%q) = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
	e := newS3TestEnv(t)
	e.do(t, s3TestRequest{method: "PUT", path: "/Bad_Name"}).wantError(t, "create invalid bucket", http.StatusBadRequest, "InvalidBucketName")
	if err := e.server.ensureBucket("Bad_Name"); err == nil {
		t.Error("ensureBucket(\"Bad_Name\") = nil; want an error")
	}
}

// TestS3ObjectRoundTrip checks PutObject, GetObject, HeadObject and DeleteObject with metadata.
func TestS3ObjectRoundTrip(t *testing.T) {
	e := newS3TestEnv(t)
	body := []byte("hello, object storage")
	resp := e.do(t, s3TestRequest{method: "PUT", path: "/bucket/docs/hello.txt", body: body, header: map[string]string{
		"Content-Type":        "text/plain; charset=utf-8",
		"Content-Disposition": "attachment",
		"X-Amz-Meta-Owner":    "ada",
		"x-amz-meta-trace-id": "t-1",
	}})
	resp.wantStatus(t, "put", http.StatusOK)
	if got, want := resp.header.Get("ETag"), s3TestMD5ETag(body); got != want {
		t.Errorf("put ETag = %s; want %s", got, want)
	}
	for _, method := range []string{"GET", "HEAD"} {
		resp := e.do(t, s3TestRequest{method: method, path: "/bucket/docs/hello.txt"})
		resp.wantStatus(t, method, http.StatusOK)
		wantHeaders := map[string]string{
			"ETag":                s3TestMD5ETag(body),
			"Content-Type":        "text/plain; charset=utf-8",
			"Content-Disposition": "attachment",
			"Content-Length":      strconv.Itoa(len(body)),
			"X-Amz-Meta-Owner":    "ada",
			"X-Amz-Meta-Trace-Id": "t-1",
			"Accept-Ranges":       "bytes",
		}
		for k, want := range wantHeaders {
			if got := resp.header.Get(k); got != want {
				t.Errorf("%s header %s = %q; want %q", method, k, got, want)
			}
		}
		if _, err := http.ParseTime(resp.header.Get("Last-Modified")); err != nil {
			t.Errorf("%s Last-Modified %q: %v", method, resp.header.Get("Last-Modified"), err)
		}
		if wantBody := map[string][]byte{"GET": body, "HEAD": {}}[method]; !bytes.Equal(resp.body, wantBody) {
			t.Errorf("%s body = %q; want %q", method, resp.body, wantBody)
		}
	}
	presp := e.do(t, s3TestRequest{method: "GET", path: "/bucket/docs/hello.txt", query: "response-content-type=application%2Fx-test"})
	if got := presp.header.Get("Content-Type"); got != "application/x-test" {
		t.Errorf("response-content-type override: Content-Type = %q", got)
	}

	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/docs/hello.txt", body: []byte("v2")}).wantStatus(t, "overwrite", http.StatusOK)
	if got := e.do(t, s3TestRequest{method: "GET", path: "/bucket/docs/hello.txt"}); string(got.body) != "v2" || got.header.Get("X-Amz-Meta-Owner") != "" || got.header.Get("Content-Type") != s3DefaultContentType {
		t.Errorf("after overwrite: body %q, meta %q, type %q; want v2, no metadata, %s", got.body, got.header.Get("X-Amz-Meta-Owner"), got.header.Get("Content-Type"), s3DefaultContentType)
	}
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/docs/hello.txt"}).wantStatus(t, "delete", http.StatusNoContent)
	e.do(t, s3TestRequest{method: "GET", path: "/bucket/docs/hello.txt"}).wantError(t, "get deleted", http.StatusNotFound, "NoSuchKey")
	e.do(t, s3TestRequest{method: "HEAD", path: "/bucket/docs/hello.txt"}).wantStatus(t, "head deleted", http.StatusNotFound)
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/docs/hello.txt"}).wantStatus(t, "delete missing", http.StatusNoContent)
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/empty"}).wantStatus(t, "put empty", http.StatusOK)
	if got := e.do(t, s3TestRequest{method: "GET", path: "/bucket/empty"}); got.status != http.StatusOK || len(got.body) != 0 || got.header.Get("ETag") != s3TestMD5ETag(nil) {
		t.Errorf("get empty object: %d %q %s", got.status, got.body, got.header.Get("ETag"))
	}
	big := map[string]string{"X-Amz-Meta-Big": strings.Repeat("m", s3MaxMetadataSize)}
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/big-meta", header: big}).wantError(t, "metadata too large", http.StatusBadRequest, "MetadataTooLarge")
}

// TestS3KeyEncoding stores and lists keys that need every kind of URI encoding.
func TestS3KeyEncoding(t *testing.T) {
	e := newS3TestEnv(t)
	keys := []string{
		"plain.txt",
		"with space/and+plus",
		"unicode/ünï©ødé/日本語.txt",
		"double//slash",
		"trailing/",
		"reserved!*'()&$@=;:,?#[]",
		"percent%20literal%2F",
		"tilde~dash-under_dot.",
		strings.Repeat("long/", 60) + "end", // past s3HexNameMaxKey: stored under its hash
	}
	for _, key := range keys {
		t.Run(key[:min(len(key), 20)], func(t *testing.T) {
			e.put(t, key, []byte("body of "+key))
			got := e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath(key)})
			got.wantStatus(t, "get", http.StatusOK)
			if string(got.body) != "body of "+key {
				t.Errorf("get %q = %q", key, got.body)
			}
		})
	}
	listed := e.listAll(t, "", "", 1000)
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("listed keys = %q; want %q", listed, want)
	}
	resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "list-type=2&encoding-type=url&prefix=with"})
	if !bytes.Contains(resp.body, []byte("<Key>with%20space/and%2Bplus</Key>")) {
		t.Errorf("encoding-type=url listing = %s; want the key URL-encoded", resp.body)
	}
}

// listAll lists the test bucket with ListObjectsV2 pages of maxKeys, returning every key and
// common prefix in order.
func (e *s3TestEnv) listAll(t *testing.T, prefix, delimiter string, maxKeys int) []string {
	t.Helper()
	var all []string
	token := ""
	for page := 0; page < 100; page++ {
		query := "delimiter=" + s3TestEscape(delimiter, false) + "&list-type=2&max-keys=" + strconv.Itoa(maxKeys) + "&prefix=" + s3TestEscape(prefix, false)
		if token != "" {
			query = "continuation-token=" + s3TestEscape(token, false) + "&" + query
		}
		res := e.listV2(t, query)
		all = append(all, res.items()...)
		if res.KeyCount != len(res.Contents)+len(res.CommonPrefixes) || res.KeyCount > maxKeys {
			t.Fatalf("page %d: KeyCount %d with %d keys and %d prefixes, max-keys %d", page, res.KeyCount, len(res.Contents), len(res.CommonPrefixes), maxKeys)
		}
		if !res.IsTruncated {
			if res.NextContinuationToken != "" {
				t.Fatalf("page %d: NextContinuationToken %q on the last page", page, res.NextContinuationToken)
			}
			return all
		}
		token = res.NextContinuationToken
	}
	t.Fatalf("list: more than 100 pages")
	return nil
}

// s3TestListResult is the part of a ListObjectsV2 response the tests read.
type s3TestListResult struct {
	IsTruncated           bool
	KeyCount              int
	NextContinuationToken string
	NextMarker            string
	Contents              []struct {
		Key  string
		ETag string
		Size int64
	}
	CommonPrefixes []struct{ Prefix string }
}

// items returns the keys and common prefixes of a page in their common (lexicographic) order.
func (res s3TestListResult) items() []string {
	var items []string
	for _, c := range res.Contents {
		items = append(items, c.Key)
	}
	for _, p := range res.CommonPrefixes {
		items = append(items, p.Prefix)
	}
	slices.Sort(items)
	return items
}

// listV2 sends a list request with the given encoded query and decodes the result.
func (e *s3TestEnv) listV2(t *testing.T, query string) s3TestListResult {
	t.Helper()
	resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: query})
	resp.wantStatus(t, "list "+query, http.StatusOK)
	var res s3TestListResult
	if err := xml.Unmarshal(resp.body, &res); err != nil {
		t.Fatalf("list %s: %v", query, err)
	}
	return res
}

// TestS3ListObjects pages ListObjectsV2 and ListObjects by prefix, delimiter and max-keys.
func TestS3ListObjects(t *testing.T) {
	e := newS3TestEnv(t)
	keys := []string{"a", "a/b", "a/c/d", "a/c/e", "a/f", "a0", "b/x", "b/y", "c", "photos/2024/jan.jpg", "photos/2024/feb.jpg", "photos/2025/mar.jpg", "photos/index.html"}
	for _, k := range keys {
		e.put(t, k, []byte(k))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	tests := []struct {
		name      string
		prefix    string
		delimiter string
		want      []string
	}{
		{"all", "", "", sorted},
		{"prefix", "photos/", "", []string{"photos/2024/feb.jpg", "photos/2024/jan.jpg", "photos/2025/mar.jpg", "photos/index.html"}},
		{"delimiter", "", "/", []string{"a", "a/", "a0", "b/", "c", "photos/"}},
		{"prefix and delimiter", "photos/", "/", []string{"photos/2024/", "photos/2025/", "photos/index.html"}},
		{"nested prefix", "a/", "/", []string{"a/b", "a/c/", "a/f"}},
		{"no match", "zzz", "/", nil},
		{"multi-char delimiter", "", "/2", []string{"a", "a/b", "a/c/d", "a/c/e", "a/f", "a0", "b/x", "b/y", "c", "photos/2", "photos/index.html"}},
	}
	for _, tt := range tests {
		for _, maxKeys := range []int{1, 2, 3, 1000} {
			t.Run(fmt.Sprintf("%s/max-keys=%d", tt.name, maxKeys), func(t *testing.T) {
				got := e.listAll(t, tt.prefix, tt.delimiter, maxKeys)
				if !slices.Equal(got, tt.want) {
					t.Errorf("list prefix %q delimiter %q = %q; want %q", tt.prefix, tt.delimiter, got, tt.want)
				}
			})
		}
	}

	res := e.listV2(t, "list-type=2&start-after=b%2Fx")
	var got []string
	for _, c := range res.Contents {
		got = append(got, c.Key)
		if c.ETag != s3TestMD5ETag([]byte(c.Key)) || c.Size != int64(len(c.Key)) {
			t.Errorf("entry %q: ETag %s size %d", c.Key, c.ETag, c.Size)
		}
	}
	if want := []string{"b/y", "c", "photos/2024/feb.jpg", "photos/2024/jan.jpg", "photos/2025/mar.jpg", "photos/index.html"}; !slices.Equal(got, want) {
		t.Errorf("start-after b/x = %q; want %q", got, want)
	}
	if res := e.listV2(t, "list-type=2&max-keys=0"); res.IsTruncated || len(res.Contents) != 0 {
		t.Errorf("max-keys=0: truncated %v, %d keys; want none, not truncated", res.IsTruncated, len(res.Contents))
	}

	// ListObjects V1 pages with marker / NextMarker.
	var v1 []string
	marker := ""
	for page := 0; page < 20; page++ {
		res := e.listV2(t, "delimiter=%2F&marker="+s3TestEscape(marker, false)+"&max-keys=2")
		v1 = append(v1, res.items()...)
		if !res.IsTruncated {
			break
		}
		marker = res.NextMarker
	}
	if want := []string{"a", "a/", "a0", "b/", "c", "photos/"}; !slices.Equal(v1, want) {
		t.Errorf("V1 pages = %q; want %q", v1, want)
	}

	for _, q := range []string{"list-type=2&max-keys=-1", "list-type=2&max-keys=x", "list-type=2&continuation-token=%21%21", "list-type=2&encoding-type=gzip"} {
		e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: q}).wantError(t, q, http.StatusBadRequest, "InvalidArgument")
	}
}

// TestS3ListPage checks the paging of sorted keys into objects and common prefixes.
func TestS3ListPage(t *testing.T) {
	keys := []string{"a", "a/b", "a/c", "b", "c/d/e", "c/d/f", "c/g"}
	tests := []struct {
		prefix, delimiter, after string
		maxKeys                  int
		objects, prefixes        []string
		next                     string
	}{
		{"", "", "", 1000, keys, nil, ""},
		{"", "", "", 2, []string{"a", "a/b"}, nil, "a/b"},
		{"", "/", "", 1000, []string{"a", "b"}, []string{"a/", "c/"}, ""},
		{"", "/", "", 2, []string{"a"}, []string{"a/"}, "a/"},
		{"", "/", "a/", 2, []string{"b"}, []string{"c/"}, ""},
		{"", "/", "a/b", 1000, []string{"b"}, []string{"c/"}, ""},
		{"c/", "/", "", 1000, []string{"c/g"}, []string{"c/d/"}, ""},
		{"", "", "c/d/e", 1000, []string{"c/d/f", "c/g"}, nil, ""},
		{"", "", "", 0, nil, nil, ""},
		{"", "", "", 7, keys, nil, ""},
	}
	for _, tt := range tests {
		var matching []string
		for _, k := range keys {
			if strings.HasPrefix(k, tt.prefix) {
				matching = append(matching, k)
			}
		}
		objects, prefixes, next := s3ListPage(matching, tt.prefix, tt.delimiter, tt.after, tt.maxKeys)
		if !slices.Equal(objects, tt.objects) || !slices.Equal(prefixes, tt.prefixes) || next != tt.next {
			t.Errorf("s3ListPage(prefix %q, delimiter %q, after %q, max %d) = %q, %q, %q; want %q, %q, %q",
				tt.prefix, tt.delimiter, tt.after, tt.maxKeys, objects, prefixes, next, tt.objects, tt.prefixes, tt.next)
		}
	}
}

// TestS3Range checks the Range forms S3 honours, ignores and refuses.
func TestS3Range(t *testing.T) {
	e := newS3TestEnv(t)
	body := []byte("0123456789")
	e.put(t, "digits", body)
	tests := []struct {
		rng          string
		status       int
		body         string
		contentRange string
	}{
		{"bytes=0-4", http.StatusPartialContent, "01234", "bytes 0-4/10"},
		{"bytes=5-", http.StatusPartialContent, "56789", "bytes 5-9/10"},
		{"bytes=-3", http.StatusPartialContent, "789", "bytes 7-9/10"},
		{"bytes=3-100", http.StatusPartialContent, "3456789", "bytes 3-9/10"},
		{"bytes=9-9", http.StatusPartialContent, "9", "bytes 9-9/10"},
		{"bytes=-100", http.StatusPartialContent, "0123456789", "bytes 0-9/10"},
		{"bytes=10-", http.StatusRequestedRangeNotSatisfiable, "", "bytes */10"},
		{"bytes=-0", http.StatusRequestedRangeNotSatisfiable, "", "bytes */10"},
		{"bytes=5-2", http.StatusOK, "0123456789", ""},
		{"bytes=0-1,3-4", http.StatusOK, "0123456789", ""},
		{"items=0-1", http.StatusOK, "0123456789", ""},
	}
	for _, tt := range tests {
		resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket/digits", header: map[string]string{"Range": tt.rng}})
		if resp.status != tt.status || resp.header.Get("Content-Range") != tt.contentRange {
			t.Errorf("Range %q: status %d, Content-Range %q; want %d, %q", tt.rng, resp.status, resp.header.Get("Content-Range"), tt.status, tt.contentRange)
			continue
		}
		if tt.status == http.StatusRequestedRangeNotSatisfiable {
			resp.wantError(t, tt.rng, tt.status, "InvalidRange")
		} else if string(resp.body) != tt.body {
			t.Errorf("Range %q: body %q; want %q", tt.rng, resp.body, tt.body)
		}
	}
	head := e.do(t, s3TestRequest{method: "HEAD", path: "/bucket/digits", header: map[string]string{"Range": "bytes=2-3"}})
	if head.status != http.StatusPartialContent || head.header.Get("Content-Length") != "2" {
		t.Errorf("HEAD with Range: status %d, Content-Length %q; want 206, 2", head.status, head.header.Get("Content-Length"))
	}
}

// TestS3PayloadVerification checks Content-MD5, x-amz-checksum-* and x-amz-content-sha256.
func TestS3PayloadVerification(t *testing.T) {
	e := newS3TestEnv(t)
	body := []byte("payload under test")
	md5sum := md5.Sum(body)
	goodMD5 := base64.StdEncoding.EncodeToString(md5sum[:])
	crc := crc32.ChecksumIEEE(body)
	goodCRC := base64.StdEncoding.EncodeToString([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	tests := []struct {
		name    string
		header  map[string]string
		payload string
		status  int
		code    string
	}{
		{"content-md5", map[string]string{"Content-MD5": goodMD5}, "", http.StatusOK, ""},
		{"wrong content-md5", map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(make([]byte, 16))}, "", http.StatusBadRequest, "BadDigest"},
		{"malformed content-md5", map[string]string{"Content-MD5": "not base64"}, "", http.StatusBadRequest, "InvalidDigest"},
		{"crc32", map[string]string{"X-Amz-Checksum-Crc32": goodCRC}, "", http.StatusOK, ""},
		{"wrong crc32", map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA=="}, "", http.StatusBadRequest, "BadDigest"},
		{"unsigned payload", nil, "UNSIGNED-PAYLOAD", http.StatusOK, ""},
		{"sha256 of another body", nil, s3TestHash([]byte("something else")), http.StatusBadRequest, "XAmzContentSHA256Mismatch"},
		{"bad x-amz-content-sha256", nil, "nonsense", http.StatusBadRequest, "InvalidArgument"},
	}
	for i, tt := range tests {
		key := fmt.Sprintf("obj-%d", i)
		resp := e.do(t, s3TestRequest{method: "PUT", path: s3TestKeyPath(key), body: body, header: tt.header, payload: tt.payload})
		if tt.code != "" {
			resp.wantError(t, tt.name, tt.status, tt.code)
			e.do(t, s3TestRequest{method: "HEAD", path: s3TestKeyPath(key)}).wantStatus(t, tt.name+": rejected object must not exist", http.StatusNotFound)
			continue
		}
		resp.wantStatus(t, tt.name, tt.status)
	}
	e.assertNoLeftovers(t)
}

// assertNoLeftovers fails the test when a temporary file or an unreferenced data file exists.
func (e *s3TestEnv) assertNoLeftovers(t *testing.T) {
	t.Helper()
	tmp, err := os.ReadDir(filepath.Join(e.root, s3TmpDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	dir := filepath.Join(e.root, "bucket")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{}
	for _, en := range entries {
		if s3IsObjectSidecar(en.Name()) {
			m, err := s3ReadMeta(filepath.Join(dir, en.Name()))
			if err != nil {
				t.Fatal(err)
			}
			referenced[m.Data] = true
		}
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "d") && !referenced[en.Name()] {
			t.Errorf("unreferenced data file %s", en.Name())
		}
	}
}

// TestS3Auth checks SigV4 header authentication and its failures.
func TestS3Auth(t *testing.T) {
	e := newS3TestEnv(t)
	e.put(t, "secret.txt", []byte("classified"))
	tests := []struct {
		name   string
		req    s3TestRequest
		edit   func(*http.Request)
		status int
		code   string
	}{
		{"signed", s3TestRequest{}, nil, http.StatusOK, ""},
		{"unsigned", s3TestRequest{anon: true}, nil, http.StatusForbidden, "AccessDenied"},
		{"unknown access key", s3TestRequest{access: "AKIDOTHER"}, nil, http.StatusForbidden, "InvalidAccessKeyId"},
		{"wrong secret", s3TestRequest{secret: "not-the-secret"}, nil, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"clock skew", s3TestRequest{at: time.Now().Add(-20 * time.Minute)}, nil, http.StatusForbidden, "RequestTimeTooSkewed"},
		{"future", s3TestRequest{at: time.Now().Add(20 * time.Minute)}, nil, http.StatusForbidden, "RequestTimeTooSkewed"},
		{"within skew", s3TestRequest{at: time.Now().Add(-10 * time.Minute)}, nil, http.StatusOK, ""},
		{"tampered signed header", s3TestRequest{header: map[string]string{"X-Amz-Meta-A": "1"}}, func(r *http.Request) { r.Header.Set("X-Amz-Meta-A", "2") }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"tampered path", s3TestRequest{}, func(r *http.Request) { r.URL.Path = "/bucket/other.txt" }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"tampered query", s3TestRequest{}, func(r *http.Request) { r.URL.RawQuery = "versionId=1" }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"sigv2", s3TestRequest{}, func(r *http.Request) { r.Header.Set("Authorization", "AWS "+s3TestAccessKey+":c2lnbmF0dXJl") }, http.StatusBadRequest, "InvalidRequest"},
		{"no content sha256", s3TestRequest{}, func(r *http.Request) { r.Header.Del("X-Amz-Content-Sha256") }, http.StatusBadRequest, "InvalidRequest"},
		{"malformed credential", s3TestRequest{}, func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "/s3/", "/ec2/", 1))
		}, http.StatusBadRequest, "AuthorizationHeaderMalformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req
			req, err := http.NewRequest("GET", e.http.URL+"/bucket/secret.txt", nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range r.header {
				req.Header.Set(k, v)
			}
			if !r.anon {
				access, secret, at := r.access, r.secret, r.at
				if access == "" {
					access = s3TestAccessKey
				}
				if secret == "" {
					secret = s3TestSecretKey
				}
				if at.IsZero() {
					at = time.Now()
				}
				s3TestSign(req, access, secret, at, s3EmptySHA256)
			}
			if tt.edit != nil {
				tt.edit(req)
			}
			resp := e.send(t, req)
			if tt.code == "" {
				resp.wantStatus(t, tt.name, tt.status)
				return
			}
			resp.wantError(t, tt.name, tt.status, tt.code)
		})
	}
}

// TestS3Presigned checks presigned URLs, valid, expired and tampered with.
func TestS3Presigned(t *testing.T) {
	e := newS3TestEnv(t)
	e.put(t, "shared/report.pdf", []byte("%PDF"))
	client := e.http.Client()
	get := func(t *testing.T, method, target string, body io.Reader) s3TestResponse {
		t.Helper()
		req, err := http.NewRequest(method, target, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return s3TestResponse{status: resp.StatusCode, header: resp.Header, body: b}
	}
	path := "/bucket/shared/report.pdf"
	if resp := get(t, "GET", e.presign("GET", path, time.Now(), 300), nil); resp.status != http.StatusOK || string(resp.body) != "%PDF" {
		t.Errorf("presigned GET: %d %q", resp.status, resp.body)
	}
	get(t, "GET", e.presign("GET", path, time.Now().Add(-2*time.Hour), 3600), nil).wantError(t, "expired presign", http.StatusForbidden, "AccessDenied")
	get(t, "GET", e.presign("GET", path, time.Now().Add(time.Hour), 7200), nil).wantError(t, "presign from the future", http.StatusForbidden, "AccessDenied")
	get(t, "GET", e.presign("GET", path, time.Now(), 8*24*3600), nil).wantError(t, "presign too long", http.StatusBadRequest, "AuthorizationQueryParametersError")
	get(t, "GET", e.presign("GET", path, time.Now(), 300)+"&extra=1", nil).wantError(t, "tampered presign", http.StatusForbidden, "SignatureDoesNotMatch")
	get(t, "HEAD", e.presign("GET", path, time.Now(), 300), nil).wantStatus(t, "presigned GET used for HEAD", http.StatusForbidden)
	get(t, "GET", e.http.URL+path+"?X-Amz-Algorithm=AWS4-HMAC-SHA256", nil).wantError(t, "incomplete presign", http.StatusBadRequest, "AuthorizationQueryParametersError")

	put := e.presign("PUT", "/bucket/uploaded.bin", time.Now(), 300)
	get(t, "PUT", put, strings.NewReader("via presigned PUT")).wantStatus(t, "presigned PUT", http.StatusOK)
	if resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket/uploaded.bin"}); string(resp.body) != "via presigned PUT" {
		t.Errorf("after presigned PUT: %q", resp.body)
	}
}

// s3TestChunked encodes data as an aws-chunked body of chunkSize pieces. With sign set, each
// chunk carries a signature chained from sign.signature; trailer ("name:value"), if not empty,
// follows the final chunk, signed too when sign is set.
func s3TestChunked(data []byte, chunkSize int, sign *s3TestSigning, trailer string) []byte {
	var b bytes.Buffer
	prev := ""
	if sign != nil {
		prev = sign.signature
	}
	chunk := func(piece []byte) {
		fmt.Fprintf(&b, "%x", len(piece))
		if sign != nil {
			sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + sign.amzDate + "\n" + sign.scope + "\n" + prev + "\n" + s3TestHash(nil) + "\n" + s3TestHash(piece)
			prev = hex.EncodeToString(s3TestHMAC(sign.key, sts))
			b.WriteString(";chunk-signature=" + prev)
		}
		b.WriteString("\r\n")
		b.Write(piece)
		if len(piece) > 0 || trailer == "" {
			b.WriteString("\r\n")
		}
	}
	for len(data) > 0 {
		n := min(chunkSize, len(data))
		chunk(data[:n])
		data = data[n:]
	}
	chunk(nil)
	if trailer != "" {
		b.WriteString(trailer + "\r\n")
		if sign != nil {
			sts := "AWS4-HMAC-SHA256-TRAILER\n" + sign.amzDate + "\n" + sign.scope + "\n" + prev + "\n" + s3TestHash([]byte(trailer+"\n"))
			b.WriteString("x-amz-trailer-signature:" + hex.EncodeToString(s3TestHMAC(sign.key, sts)) + "\r\n")
		}
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// putChunked uploads data as an aws-chunked body in the given x-amz-content-sha256 mode;
// tamper, if set, may corrupt the encoded body before it is sent.
func (e *s3TestEnv) putChunked(t *testing.T, key string, data []byte, mode, trailer string, declared int, tamper func([]byte)) s3TestResponse {
	t.Helper()
	signed := mode != "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	placeholder := &s3TestSigning{signature: strings.Repeat("0", 64)}
	if !signed {
		placeholder = nil
	}
	size := len(s3TestChunked(data, 4096, placeholder, trailer))
	req, err := http.NewRequest("PUT", e.http.URL+s3TestKeyPath(key), bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(declared))
	if trailer != "" {
		name, _, _ := strings.Cut(trailer, ":")
		req.Header.Set("X-Amz-Trailer", name)
	}
	sig := s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), mode)
	var body []byte
	if signed {
		body = s3TestChunked(data, 4096, &sig, trailer)
	} else {
		body = s3TestChunked(data, 4096, nil, trailer)
	}
	if len(body) != size {
		t.Fatalf("chunked body is %d bytes; signed for %d", len(body), size)
	}
	if tamper != nil {
		tamper(body)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return e.send(t, req)
}

// TestS3StreamingPayloads checks the aws-chunked bodies current SDKs send.
func TestS3StreamingPayloads(t *testing.T) {
	e := newS3TestEnv(t)
	data := bytes.Repeat([]byte("streaming payload "), 1000) // 18000 bytes: 5 chunks of 4096
	crc := crc32.ChecksumIEEE(data)
	crcTrailer := "x-amz-checksum-crc32:" + base64.StdEncoding.EncodeToString([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	flipData := func(b []byte) { b[bytes.Index(b, []byte("streaming"))+3] ^= 1 }
	tests := []struct {
		name     string
		mode     string
		trailer  string
		declared int
		tamper   func([]byte)
		status   int
		code     string
	}{
		{"signed chunks", s3StreamingSigned, "", len(data), nil, http.StatusOK, ""},
		{"signed chunks with trailer", s3StreamingSignedTrailer, crcTrailer, len(data), nil, http.StatusOK, ""},
		{"unsigned chunks with trailer", s3StreamingUnsignedTrailer, crcTrailer, len(data), nil, http.StatusOK, ""},
		{"unsigned chunks, no trailer", s3StreamingUnsignedTrailer, "", len(data), nil, http.StatusOK, ""},
		{"tampered signed chunk", s3StreamingSigned, "", len(data), flipData, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"tampered chunk signature", s3StreamingSigned, "", len(data), func(b []byte) { b[bytes.Index(b, []byte("chunk-signature="))+16] ^= 1 }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"tampered trailer", s3StreamingSignedTrailer, crcTrailer, len(data), func(b []byte) { b[bytes.Index(b, []byte("x-amz-checksum-crc32:"))+22] ^= 1 }, http.StatusForbidden, "SignatureDoesNotMatch"},
		{"unsigned data corrupted", s3StreamingUnsignedTrailer, crcTrailer, len(data), flipData, http.StatusBadRequest, "BadDigest"},
		{"wrong decoded length", s3StreamingSigned, "", len(data) + 1, nil, http.StatusBadRequest, "IncompleteBody"},
		{"broken framing", s3StreamingUnsignedTrailer, "", len(data), func(b []byte) { b[0] = 'z' }, http.StatusBadRequest, "InvalidRequest"},
		{"too many trailers", s3StreamingUnsignedTrailer, strings.Repeat("x-amz-foo:1\r\n", s3MaxTrailerLines) + "x-amz-foo:1", len(data), nil, http.StatusBadRequest, "InvalidRequest"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("stream-%d", i)
			resp := e.putChunked(t, key, data, tt.mode, tt.trailer, tt.declared, tt.tamper)
			if tt.code != "" {
				resp.wantError(t, tt.name, tt.status, tt.code)
				e.do(t, s3TestRequest{method: "HEAD", path: s3TestKeyPath(key)}).wantStatus(t, "rejected object", http.StatusNotFound)
				return
			}
			resp.wantStatus(t, tt.name, tt.status)
			got := e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath(key)})
			if !bytes.Equal(got.body, data) || got.header.Get("ETag") != s3TestMD5ETag(data) {
				t.Errorf("stored %d bytes, ETag %s; want %d bytes, %s", len(got.body), got.header.Get("ETag"), len(data), s3TestMD5ETag(data))
			}
			if ce := got.header.Get("Content-Encoding"); ce != "" {
				t.Errorf("Content-Encoding %q stored; aws-chunked must not be", ce)
			}
		})
	}
	e.assertNoLeftovers(t)
}

// TestS3AWSStreamingExample replays the chunked upload example of the S3 SigV4 documentation
// (its published seed and chunk signatures) with the clock pinned to its date.
func TestS3AWSStreamingExample(t *testing.T) {
	s, err := newS3Server(t.TempDir(), "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC) }
	if err := s.ensureBucket("examplebucket"); err != nil {
		t.Fatal(err)
	}
	body := "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" + strings.Repeat("a", 65536) + "\r\n" +
		"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" + strings.Repeat("a", 1024) + "\r\n" +
		"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n"
	send := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("PUT", "http://s3.amazonaws.com/examplebucket/chunkObject.txt", strings.NewReader(body))
		req.Header.Set("X-Amz-Date", "20130524T000000Z")
		req.Header.Set("X-Amz-Storage-Class", "REDUCED_REDUNDANCY")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")
		req.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Decoded-Content-Length", "66560")
		req.Header.Set("Content-Length", "66824")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if len(body) != 66824 {
		t.Fatalf("example body is %d bytes; want 66824", len(body))
	}
	tampered := strings.Replace(body, "aaaa\r\n400;", "aaab\r\n400;", 1)
	if rec := send(tampered); rec.Code != http.StatusForbidden {
		t.Errorf("tampered example: status %d; want 403 (%s)", rec.Code, rec.Body)
	}
	if rec := send(body); rec.Code != http.StatusOK {
		t.Fatalf("documented example: status %d; want 200 (%s)", rec.Code, rec.Body)
	}
	meta, f, err := s.openObject("examplebucket", "chunkObject.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _ := io.ReadAll(f)
	if meta.Size != 66560 || string(got) != strings.Repeat("a", 66560) {
		t.Errorf("stored %d bytes (%d read); want 66560 of 'a'", meta.Size, len(got))
	}
}

// TestS3ChecksumAlgorithms checks each checksum algorithm against its published check value.
func TestS3ChecksumAlgorithms(t *testing.T) {
	want := map[string]string{ // check values of "123456789"
		"crc32":     "cbf43926",
		"crc32c":    "e3069283",
		"crc64nvme": "ae8b14860a799888",
		"sha1":      "f7c3bc1d808e04732adf679965ccc34ca7ae3441",
		"sha256":    "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225",
	}
	for name, check := range want {
		h := s3NewChecksum(name)
		io.WriteString(h, "123456789")
		if got := hex.EncodeToString(h.Sum(nil)); got != check {
			t.Errorf("%s(123456789) = %s; want %s", name, got, check)
		}
	}
	if h := s3NewChecksum("md4"); h != nil {
		t.Errorf("s3NewChecksum(\"md4\") = %T; want nil", h)
	}
}

// TestS3CopyObject checks CopyObject with both metadata directives.
func TestS3CopyObject(t *testing.T) {
	e := newS3TestEnv(t)
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/src/a b.txt", body: []byte("copy me"), header: map[string]string{"Content-Type": "text/plain", "X-Amz-Meta-Tag": "orig"}}).wantStatus(t, "put", http.StatusOK)
	tests := []struct {
		name, source, directive string
		header                  map[string]string
		status                  int
		code                    string
		wantType, wantTag       string
	}{
		{"copy metadata", "/bucket/src/a%20b.txt", "", nil, http.StatusOK, "", "text/plain", "orig"},
		{"replace metadata", "bucket/src/a%20b.txt", "REPLACE", map[string]string{"Content-Type": "application/json", "X-Amz-Meta-Tag": "new"}, http.StatusOK, "", "application/json", "new"},
		{"missing source", "/bucket/nothing", "", nil, http.StatusNotFound, "NoSuchKey", "", ""},
		{"missing source bucket", "/nobucket/x", "", nil, http.StatusNotFound, "NoSuchBucket", "", ""},
		{"traversing source", "/bucket/..%2F..%2Fetc%2Fpasswd", "", nil, http.StatusBadRequest, "InvalidArgument", "", ""},
		{"bad directive", "/bucket/src/a%20b.txt", "MOVE", nil, http.StatusBadRequest, "InvalidArgument", "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := map[string]string{"X-Amz-Copy-Source": tt.source}
			if tt.directive != "" {
				header["X-Amz-Metadata-Directive"] = tt.directive
			}
			for k, v := range tt.header {
				header[k] = v
			}
			dst := fmt.Sprintf("/bucket/dst-%d", i)
			resp := e.do(t, s3TestRequest{method: "PUT", path: dst, header: header})
			if tt.code != "" {
				resp.wantError(t, tt.name, tt.status, tt.code)
				return
			}
			resp.wantStatus(t, tt.name, tt.status)
			var res struct{ ETag, LastModified string }
			if err := xml.Unmarshal(resp.body, &res); err != nil || res.ETag != s3TestMD5ETag([]byte("copy me")) {
				t.Errorf("copy result %+v, %v", res, err)
			}
			got := e.do(t, s3TestRequest{method: "GET", path: dst})
			if string(got.body) != "copy me" || got.header.Get("Content-Type") != tt.wantType || got.header.Get("X-Amz-Meta-Tag") != tt.wantTag {
				t.Errorf("copy: body %q, type %q, tag %q; want copy me, %q, %q", got.body, got.header.Get("Content-Type"), got.header.Get("X-Amz-Meta-Tag"), tt.wantType, tt.wantTag)
			}
		})
	}
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/src/a%20b.txt", header: map[string]string{"X-Amz-Copy-Source": "/bucket/src/a%20b.txt"}}).wantError(t, "copy onto itself", http.StatusBadRequest, "InvalidRequest")
}

// TestS3DeleteObjects checks DeleteObjects, verbose and quiet.
func TestS3DeleteObjects(t *testing.T) {
	e := newS3TestEnv(t)
	for _, k := range []string{"x/1", "x/2", "x/3"} {
		e.put(t, k, []byte(k))
	}
	body := `<Delete><Object><Key>x/1</Key></Object><Object><Key>x/2</Key></Object><Object><Key>missing</Key></Object><Object><Key>../escape</Key></Object></Delete>`
	resp := e.do(t, s3TestRequest{method: "POST", path: "/bucket", query: "delete", body: []byte(body)})
	resp.wantStatus(t, "delete objects", http.StatusOK)
	var res struct {
		Deleted []struct{ Key string }
		Error   []struct{ Key, Code string }
	}
	if err := xml.Unmarshal(resp.body, &res); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, d := range res.Deleted {
		deleted = append(deleted, d.Key)
	}
	if want := []string{"x/1", "x/2", "missing"}; !slices.Equal(deleted, want) || len(res.Error) != 1 || res.Error[0].Key != "../escape" || res.Error[0].Code != "InvalidArgument" {
		t.Errorf("delete objects = %+v; want deleted %q and an InvalidArgument error for ../escape", res, want)
	}
	if got := e.listAll(t, "", "", 1000); !slices.Equal(got, []string{"x/3"}) {
		t.Errorf("left after delete = %q; want [x/3]", got)
	}
	quiet := e.do(t, s3TestRequest{method: "POST", path: "/bucket", query: "delete", body: []byte(`<Delete><Quiet>true</Quiet><Object><Key>x/3</Key></Object></Delete>`)})
	if quiet.status != http.StatusOK || bytes.Contains(quiet.body, []byte("<Deleted>")) {
		t.Errorf("quiet delete: %d %s", quiet.status, quiet.body)
	}
	e.do(t, s3TestRequest{method: "POST", path: "/bucket", query: "delete", body: []byte(`<Delete></Delete>`)}).wantError(t, "empty delete", http.StatusBadRequest, "MalformedXML")
}

// TestS3PathTraversal checks that no key or bucket name reaches outside the root.
func TestS3PathTraversal(t *testing.T) {
	e := newS3TestEnv(t)
	tests := []struct {
		name   string
		path   string
		status int
		code   string
	}{
		{"dot-dot key", "/bucket/../outside", http.StatusBadRequest, "InvalidArgument"},
		{"nested dot-dot key", "/bucket/a/../../outside", http.StatusBadRequest, "InvalidArgument"},
		{"encoded dot-dot key", "/bucket/%2E%2E%2F%2E%2E%2Foutside", http.StatusBadRequest, "InvalidArgument"},
		{"dot key", "/bucket/./x", http.StatusBadRequest, "InvalidArgument"},
		{"absolute key", "/bucket//etc/passwd", http.StatusBadRequest, "InvalidArgument"},
		{"encoded absolute key", "/bucket/%2Fetc%2Fpasswd", http.StatusBadRequest, "InvalidArgument"},
		{"dot-dot bucket", "/../x", http.StatusBadRequest, "InvalidBucketName"},
		{"encoded dot-dot bucket", "/%2E%2E/x", http.StatusBadRequest, "InvalidBucketName"},
		{"temporary directory as bucket", "/.tmp/x", http.StatusBadRequest, "InvalidBucketName"},
		{"uploads directory as bucket", "/.uploads/x", http.StatusBadRequest, "InvalidBucketName"},
		{"key too long", "/bucket/" + strings.Repeat("k", s3MaxKeyLength+1), http.StatusBadRequest, "KeyTooLongError"},
		{"invalid UTF-8 key", "/bucket/%FF%FE", http.StatusBadRequest, "InvalidArgument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, method := range []string{"PUT", "GET", "DELETE"} {
				req, err := http.NewRequest(method, e.http.URL+tt.path, bytes.NewReader([]byte("escaped")))
				if err != nil {
					t.Fatal(err)
				}
				s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), s3TestHash([]byte("escaped")))
				e.send(t, req).wantError(t, method+" "+tt.path, tt.status, tt.code)
			}
		})
	}
	// Nothing was written beside the root or outside the bucket.
	siblings, err := os.ReadDir(filepath.Dir(e.root))
	if err != nil {
		t.Fatal(err)
	}
	if len(siblings) != 1 || siblings[0].Name() != "s3" {
		t.Errorf("entries beside the root: %v", siblings)
	}
	if got := e.listAll(t, "", "", 1000); len(got) != 0 {
		t.Errorf("objects stored: %q", got)
	}
}

// TestS3Restart checks that a new server on the same root sees the same objects and uploads.
func TestS3Restart(t *testing.T) {
	e := newS3TestEnv(t)
	e.put(t, "durable/one", []byte("first"))
	id := e.multipartUpload(t, "durable/parts", nil)
	e.uploadPart(t, "durable/parts", id, 1, []byte("part one"))
	stray := filepath.Join(e.root, s3TmpDir, "data-crashed")
	if err := os.WriteFile(stray, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := newS3Server(e.root, s3TestAccessKey, s3TestSecretKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray temporary file survived a restart: %v", err)
	}
	meta, f, err := s.openObject("bucket", "durable/one")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _ := io.ReadAll(f)
	if string(got) != "first" || meta.ETag != s3TestMD5ETag([]byte("first")) {
		t.Errorf("after restart: %q, ETag %s", got, meta.ETag)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	e2 := &s3TestEnv{server: s, http: ts, root: e.root}
	resp := e2.do(t, s3TestRequest{method: "GET", path: "/bucket/durable/parts", query: "uploadId=" + id})
	if resp.status != http.StatusOK || !bytes.Contains(resp.body, []byte("<PartNumber>1</PartNumber>")) {
		t.Errorf("upload after restart: %d %s", resp.status, resp.body)
	}
}

// TestS3ConcurrentOverwrites overwrites and reads one key concurrently: every read is consistent and no data file leaks.
func TestS3ConcurrentOverwrites(t *testing.T) {
	e := newS3TestEnv(t)
	const writers, rounds = 4, 8
	var wg sync.WaitGroup
	errs := make(chan string, writers*rounds*2)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				body := bytes.Repeat([]byte{byte('a' + w)}, 1000+i)
				req, _ := http.NewRequest("PUT", e.http.URL+"/bucket/contended", bytes.NewReader(body))
				s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), s3TestHash(body))
				resp, err := e.http.Client().Do(req)
				if err != nil {
					errs <- err.Error()
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Sprintf("put status %d", resp.StatusCode)
				}
				req, _ = http.NewRequest("GET", e.http.URL+"/bucket/contended", nil)
				s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), s3EmptySHA256)
				resp, err = e.http.Client().Do(req)
				if err != nil {
					errs <- err.Error()
					continue
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != s3TestMD5ETag(got) {
					errs <- fmt.Sprintf("get: status %d, ETag %s does not match the %d bytes read", resp.StatusCode, resp.Header.Get("ETag"), len(got))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.assertNoLeftovers(t)
}

// TestS3SizeLimits checks that bodies past s3MaxObjectSize are refused, whether declared up
// front or found while reading.
func TestS3SizeLimits(t *testing.T) {
	e := newS3TestEnv(t)
	tests := []struct {
		name          string
		contentLength int64
		decoded       string
	}{
		{"content-length", s3MaxObjectSize + 1, ""},
		{"decoded content length", 5, strconv.Itoa(s3MaxObjectSize + 1)},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("PUT", "http://s3.test/bucket/huge", strings.NewReader("small"))
		req.ContentLength = tt.contentLength
		if tt.decoded != "" {
			req.Header.Set("X-Amz-Decoded-Content-Length", tt.decoded)
		}
		s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), "UNSIGNED-PAYLOAD")
		rec := httptest.NewRecorder()
		e.server.ServeHTTP(rec, req)
		s3TestResponse{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}.wantError(t, tt.name, http.StatusBadRequest, "EntityTooLarge")
	}
	if _, _, _, err := e.server.spool(strings.NewReader("12345678901"), 10); err != s3ErrEntityTooLarge {
		t.Errorf("spool of 11 bytes with limit 10: %v; want EntityTooLarge", err)
	}
	path, n, _, err := e.server.spool(strings.NewReader("1234567890"), 10)
	if err != nil || n != 10 {
		t.Fatalf("spool of 10 bytes with limit 10: %d, %v", n, err)
	}
	os.Remove(path)
	e.do(t, s3TestRequest{method: "GET", path: "/bucket/huge"}).wantError(t, "refused object", http.StatusNotFound, "NoSuchKey")
	e.assertNoLeftovers(t)
}

// TestS3UnsetBucketConfigs checks the bucket subresources answered as S3 answers them for a
// bucket where they were never configured.
func TestS3UnsetBucketConfigs(t *testing.T) {
	e := newS3TestEnv(t)
	documents := []struct {
		subresource string
		want        string // the whole document after the XML header
	}{
		{"versioning", `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></VersioningConfiguration>`},
		{"logging", `<BucketLoggingStatus xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></BucketLoggingStatus>`},
		{"requestPayment", `<RequestPaymentConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Payer>BucketOwner</Payer></RequestPaymentConfiguration>`},
		{"acl", `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>svc</ID><DisplayName>svc</DisplayName></Owner><AccessControlList><Grant>` +
			`<Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>svc</ID><DisplayName>svc</DisplayName></Grantee>` +
			`<Permission>FULL_CONTROL</Permission></Grant></AccessControlList></AccessControlPolicy>`},
	}
	for _, tt := range documents {
		resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: tt.subresource})
		resp.wantStatus(t, "GET ?"+tt.subresource, http.StatusOK)
		if got := strings.TrimPrefix(string(resp.body), xml.Header); got != tt.want {
			t.Errorf("GET ?%s = %s; want %s", tt.subresource, got, tt.want)
		}
	}
	errs := []struct {
		subresource, code string
	}{
		{"lifecycle", "NoSuchLifecycleConfiguration"},
		{"policy", "NoSuchBucketPolicy"},
		{"cors", "NoSuchCORSConfiguration"},
		{"tagging", "NoSuchTagSet"},
		{"object-lock", "ObjectLockConfigurationNotFoundError"},
		{"encryption", "ServerSideEncryptionConfigurationNotFoundError"},
		{"website", "NoSuchWebsiteConfiguration"},
	}
	for _, tt := range errs {
		e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: tt.subresource}).wantError(t, "GET ?"+tt.subresource, http.StatusNotFound, tt.code)
	}
	e.do(t, s3TestRequest{method: "GET", path: "/missing", query: "versioning"}).wantError(t, "versioning of a missing bucket", http.StatusNotFound, "NoSuchBucket")
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket", query: "versioning", body: []byte("<VersioningConfiguration/>")}).wantError(t, "PUT ?versioning", http.StatusNotImplemented, "NotImplemented")
	e.put(t, "obj", []byte("x"))
	e.do(t, s3TestRequest{method: "GET", path: "/bucket/obj", query: "tagging"}).wantError(t, "object tagging", http.StatusNotImplemented, "NotImplemented")
}

// TestS3SignatureV2 checks that a Signature Version 2 request other than a presigned GET or
// HEAD (TestS3PresignedV2Clients) is told to switch to SigV4, and how.
func TestS3SignatureV2(t *testing.T) {
	e := newS3TestEnv(t)
	e.put(t, "report.txt", []byte("v4 only"))
	expires := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	tests := []struct {
		name   string
		method string
		query  string
		header string // Authorization
	}{
		{"header", "GET", "", "AWS " + s3TestAccessKey + ":c2lnbmF0dXJl"},
		{"presigned PUT", "PUT", "AWSAccessKeyId=" + s3TestAccessKey + "&Expires=" + expires + "&Signature=c2lnbmF0dXJl", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, e.http.URL+"/bucket/report.txt?"+tt.query, strings.NewReader("overwritten"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
				req.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
			}
			resp := e.send(t, req)
			resp.wantSigV4Hint(t, tt.name)
			for _, want := range []string{"Signature Version 4", "signature_v2 = False"} {
				if !strings.Contains(string(resp.body), want) {
					t.Errorf("%s: error lacks %q: %s", tt.name, want, resp.body)
				}
			}
		})
	}
	if resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket/report.txt"}); string(resp.body) != "v4 only" {
		t.Errorf("after the refused SigV2 requests report.txt = %q", resp.body)
	}
}

// TestS3Janitor checks that the janitor removes multipart uploads and temporary files abandoned
// for s3StaleAge and keeps fresh ones, sweeps when started, and that Close waits for it.
func TestS3Janitor(t *testing.T) {
	e := newS3TestEnv(t)
	stale := time.Now().Add(-s3StaleAge - time.Minute)
	backdate := func(t *testing.T, path string) {
		t.Helper()
		if err := os.Chtimes(path, stale, stale); err != nil {
			t.Fatal(err)
		}
	}
	upload := func(t *testing.T, key string) string {
		id := e.multipartUpload(t, key, nil)
		e.uploadPart(t, key, id, 1, []byte("part of "+key))
		return filepath.Join(e.root, s3UploadsDir, id)
	}
	exists := func(path string) bool {
		_, err := os.Stat(path)
		return err == nil
	}
	abandoned, fresh := upload(t, "abandoned"), upload(t, "fresh")
	backdate(t, abandoned)
	oldTmp, newTmp := filepath.Join(e.root, s3TmpDir, "data-old"), filepath.Join(e.root, s3TmpDir, "data-new")
	for _, p := range []string{oldTmp, newTmp} {
		if err := os.WriteFile(p, []byte("spooled"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	backdate(t, oldTmp)
	e.server.sweep(t.Context(), time.Now())
	for path, want := range map[string]bool{abandoned: false, fresh: true, oldTmp: false, newTmp: true} {
		if exists(path) != want {
			t.Errorf("after a sweep, %s exists = %v; want %v", path, !want, want)
		}
	}
	if got := e.listUploads(t, ""); len(got.Upload) != 1 || got.Upload[0].Key != "fresh" {
		t.Errorf("uploads after a sweep = %q; want only fresh", got.items())
	}
	os.Remove(newTmp)

	// A server's janitor sweeps when it starts; Close stops it and waits.
	late := upload(t, "late")
	backdate(t, late)
	s, err := newS3Server(e.root, s3TestAccessKey, s3TestSecretKey)
	if err != nil {
		t.Fatal(err)
	}
	s.logger = e.server.logger
	s.start()
	eventually(t, 10*time.Second, "the started janitor to remove the abandoned upload", func() bool { return !exists(late) })
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.janitorDone:
	default:
		t.Fatal("Close returned before the janitor ended")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if !exists(fresh) {
		t.Error("the started janitor removed the fresh upload")
	}
	if err := e.server.Close(); err != nil {
		t.Errorf("Close of a server never started: %v", err)
	}
}
