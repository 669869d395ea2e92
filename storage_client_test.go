package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newStorageTestServer starts a built-in S3 server on 127.0.0.1 with bucket "svc" and the
// given keys, and returns the target that reaches it.
func newStorageTestServer(t testing.TB, access, secret string) storageTarget {
	t.Helper()
	s, err := newS3Server(filepath.Join(t.TempDir(), "s3"), access, secret)
	if err != nil {
		t.Fatal(err)
	}
	s.logger = slog.New(slog.DiscardHandler)
	if err := s.ensureBucket("svc"); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return storageTarget{Endpoint: ts.URL, Bucket: "svc", Region: "us-east-1", AccessKey: access, SecretKey: secret}
}

// newStorageTestClient returns a client of a fresh built-in server.
func newStorageTestClient(t testing.TB) *storageClient {
	t.Helper()
	c, err := newStorageClient(newStorageTestServer(t, "storagekey", "storagesecret"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storageReadAll reads and closes a GetObject body.
func storageReadAll(t *testing.T, b *storageBody) string {
	t.Helper()
	defer b.Body.Close()
	data, err := io.ReadAll(b.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestStorageClientRoundTrip(t *testing.T) {
	c := newStorageTestClient(t)
	ctx := context.Background()
	// Keys with spaces, unicode, '+', '%' and '?' must sign and travel intact.
	for _, key := range []string{"plain.txt", "dir/sub dir/ünï+%?&=.txt", strings.Repeat("k", 1024)} {
		etag, err := c.put(ctx, key, []byte("hello "+key[:3]), "text/plain")
		if err != nil {
			t.Fatalf("put(%q): %v", key, err)
		}
		if len(etag) != 32 {
			t.Errorf("put(%q) etag = %q; want 32 hex digits", key, etag)
		}
		b, err := c.get(ctx, key, nil)
		if err != nil {
			t.Fatalf("get(%q): %v", key, err)
		}
		if got := storageReadAll(t, b); got != "hello "+key[:3] || b.ContentType != "text/plain" || b.ETag != etag || b.Range != nil {
			t.Errorf("get(%q) = %q %+v", key, got, b.storageObject)
		}
		h, err := c.head(ctx, key)
		if err != nil || h.Size != int64(len("hello "+key[:3])) || h.ETag != etag || time.Since(h.LastModified) > time.Minute {
			t.Errorf("head(%q) = %+v, %v", key, h, err)
		}
	}
	if _, err := c.get(ctx, "missing", nil); !storageIsNotFound(err) {
		t.Errorf("get(missing) error = %v; want NoSuchKey", err)
	}
	if _, err := c.head(ctx, "missing"); !storageIsNotFound(err) {
		t.Errorf("head(missing) error = %v; want NotFound", err)
	}
	if err := c.delete(ctx, "plain.txt"); err != nil {
		t.Fatal(err)
	}
	if err := c.delete(ctx, "plain.txt"); err != nil {
		t.Errorf("delete of a missing key: %v", err)
	}
	if _, err := c.head(ctx, "plain.txt"); !storageIsNotFound(err) {
		t.Errorf("head after delete: %v", err)
	}
}

func TestStorageClientRanges(t *testing.T) {
	c := newStorageTestClient(t)
	ctx := context.Background()
	if _, err := c.put(ctx, "r", []byte("0123456789"), ""); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		rng   storageRange
		want  string
		start int64
	}{
		{"offset and length", storageRange{Offset: 2, Length: 3}, "234", 2},
		{"offset to end", storageRange{Offset: 7}, "789", 7},
		{"length past end", storageRange{Offset: 8, Length: 10}, "89", 8},
		{"suffix", storageRange{Suffix: 4}, "6789", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := c.get(ctx, "r", &tt.rng)
			if err != nil {
				t.Fatal(err)
			}
			if got := storageReadAll(t, b); got != tt.want || b.Size != 10 || b.Range == nil || b.Range[0] != tt.start || b.Range[1] != int64(len(tt.want)) {
				t.Errorf("get(%+v) = %q size %d range %v; want %q", tt.rng, got, b.Size, b.Range, tt.want)
			}
		})
	}
	var se *storageError
	if _, err := c.get(ctx, "r", &storageRange{Offset: 10}); !errors.As(err, &se) || se.Code != "InvalidRange" || se.Status != 416 {
		t.Errorf("get past the end: %v; want InvalidRange (416)", err)
	}
}

func TestStorageClientList(t *testing.T) {
	c := newStorageTestClient(t)
	ctx := context.Background()
	keys := []string{"a/1", "a/2", "a/b/3", "b/4", "c", "tab\tkey"}
	for _, k := range keys {
		if _, err := c.put(ctx, k, []byte(k), ""); err != nil {
			t.Fatal(err)
		}
	}
	// Every page of 2 in turn, following the cursor.
	var all []string
	cursor := ""
	for range 10 {
		page, err := c.list(ctx, storageListOptions{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) > 2 {
			t.Fatalf("page of %d objects; limit 2", len(page.Objects))
		}
		for _, o := range page.Objects {
			if o.Size != int64(len(o.Key)) || o.ETag == "" || o.LastModified.IsZero() {
				t.Errorf("listed %+v", o)
			}
			all = append(all, o.Key)
		}
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	if fmt.Sprint(all) != fmt.Sprint(keys) {
		t.Errorf("paged listing = %q; want %q", all, keys)
	}
	page, err := c.list(ctx, storageListOptions{Prefix: "a/", Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 2 || page.Objects[0].Key != "a/1" || fmt.Sprint(page.Prefixes) != "[a/b/]" || page.Cursor != "" {
		t.Errorf("list(prefix a/, delimiter /) = %+v", page)
	}
	page, err = c.list(ctx, storageListOptions{Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 2 || fmt.Sprint(page.Prefixes) != "[a/ b/]" {
		t.Errorf("list(delimiter /) = %+v", page)
	}
	if err := c.deleteMany(ctx, keys[:4]); err != nil {
		t.Fatal(err)
	}
	page, err = c.list(ctx, storageListOptions{})
	if err != nil || len(page.Objects) != 2 {
		t.Errorf("after deleteMany: %+v, %v", page, err)
	}
}

func TestStorageClientPresign(t *testing.T) {
	c := newStorageTestClient(t)
	put, err := c.presign(http.MethodPut, "up/loaded file.bin", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, put, strings.NewReader("via presigned PUT"))
	req.Header.Set("Content-Type", "application/x-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %s", resp.Status)
	}
	get, err := c.presign(http.MethodGet, "up/loaded file.bin", 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(get)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "via presigned PUT" || resp.Header.Get("Content-Type") != "application/x-test" {
		t.Errorf("presigned GET: %s %q %q", resp.Status, body, resp.Header.Get("Content-Type"))
	}
	// An expired URL is refused.
	c.now = func() time.Time { return time.Now().Add(-2 * time.Minute) }
	old, err := c.presign(http.MethodGet, "up/loaded file.bin", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(old)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "expired") {
		t.Errorf("expired presigned GET: %s %s", resp.Status, body)
	}
	for _, d := range []time.Duration{0, 7*24*time.Hour + time.Second} {
		if _, err := c.presign(http.MethodGet, "k", d); err == nil {
			t.Errorf("presign(%v) accepted", d)
		}
	}
}

func TestStorageClientErrors(t *testing.T) {
	target := newStorageTestServer(t, "storagekey", "storagesecret")
	ctx := context.Background()
	wrong := target
	wrong.SecretKey = "not-the-secret"
	c, err := newStorageClient(wrong)
	if err != nil {
		t.Fatal(err)
	}
	var se *storageError
	if _, err := c.put(ctx, "k", []byte("x"), ""); !errors.As(err, &se) || se.Code != "SignatureDoesNotMatch" || se.Status != 403 || !strings.Contains(err.Error(), `storage put "k": SignatureDoesNotMatch (403)`) {
		t.Errorf("wrong secret: %v", err)
	}
	nobucket := target
	nobucket.Bucket = "other"
	c, _ = newStorageClient(nobucket)
	if _, err := c.list(ctx, storageListOptions{}); !errors.As(err, &se) || se.Code != "NoSuchBucket" {
		t.Errorf("missing bucket: %v", err)
	}
	down := target
	down.Endpoint = "http://127.0.0.1:1"
	c, _ = newStorageClient(down)
	if _, err := c.head(ctx, "k"); !errors.As(err, &se) || se.Code != "NetworkError" || se.Err == nil {
		t.Errorf("unreachable endpoint: %v", err)
	}
	for _, bad := range []storageTarget{
		{Endpoint: "ftp://x", Bucket: "svc", AccessKey: "a", SecretKey: "b"},
		{Endpoint: "http://x", Bucket: "Bad_Bucket", AccessKey: "a", SecretKey: "b"},
		{Endpoint: "http://x", Bucket: "svc"},
	} {
		if _, err := newStorageClient(bad); err == nil {
			t.Errorf("newStorageClient(%+v) accepted", bad)
		}
	}
}

// storageChunks returns a next function yielding data in chunks of n bytes.
func storageChunks(data []byte, n int) func() ([]byte, error) {
	return func() ([]byte, error) {
		if len(data) == 0 {
			return nil, io.EOF
		}
		chunk := data[:min(n, len(data))]
		data = data[len(chunk):]
		return chunk, nil
	}
}

func TestStorageClientPutStream(t *testing.T) {
	c := newStorageTestClient(t)
	ctx := context.Background()
	small := []byte("a small stream")
	etag, size, err := c.putStream(ctx, "small", storageChunks(small, 3), "text/plain")
	if err != nil || size != int64(len(small)) || len(etag) != 32 {
		t.Fatalf("putStream(small) = %q, %d, %v", etag, size, err)
	}
	// Past one part: a multipart upload of two full parts and a short one.
	big := bytes.Repeat([]byte("0123456789abcdef"), (2*storagePartSize+1000)/16)
	etag, size, err = c.putStream(ctx, "big", storageChunks(big, 64<<10), "application/octet-stream")
	if err != nil || size != int64(len(big)) || !strings.HasSuffix(etag, "-3") {
		t.Fatalf("putStream(big) = %q, %d, %v; want a 3-part ETag", etag, size, err)
	}
	b, err := c.get(ctx, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(b.Body)
	b.Body.Close()
	if !bytes.Equal(got, big) || b.ContentType != "application/octet-stream" {
		t.Errorf("big read back: %d bytes (want %d), type %q", len(got), len(big), b.ContentType)
	}
	// A stream that fails midway stores nothing and leaves no upload behind.
	failing := storageChunks(big, 1<<20)
	n := 0
	boom := errors.New("source failed")
	_, _, err = c.putStream(ctx, "broken", func() ([]byte, error) {
		if n++; n > 10 {
			return nil, boom
		}
		return failing()
	}, "")
	if !errors.Is(err, boom) {
		t.Errorf("failing stream: %v", err)
	}
	if _, err := c.head(ctx, "broken"); !storageIsNotFound(err) {
		t.Errorf("failing stream stored an object: %v", err)
	}
}
