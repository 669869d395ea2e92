package main

// The built-in S3 server's multipart uploads: create, parts, complete, list.

import (
	"bytes"
	"crypto/md5"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// multipartUpload starts a multipart upload of key and returns its id.
func (e *s3TestEnv) multipartUpload(t *testing.T, key string, header map[string]string) string {
	t.Helper()
	resp := e.do(t, s3TestRequest{method: "POST", path: s3TestKeyPath(key), query: "uploads", header: header})
	resp.wantStatus(t, "create multipart upload", http.StatusOK)
	var res struct{ Bucket, Key, UploadId string }
	if err := xml.Unmarshal(resp.body, &res); err != nil || res.UploadId == "" || res.Key != key || res.Bucket != "bucket" {
		t.Fatalf("create multipart upload: %+v, %v", res, err)
	}
	return res.UploadId
}

// uploadPart uploads one part and returns its ETag.
func (e *s3TestEnv) uploadPart(t *testing.T, key, id string, n int, data []byte) string {
	t.Helper()
	resp := e.do(t, s3TestRequest{method: "PUT", path: s3TestKeyPath(key), query: fmt.Sprintf("partNumber=%d&uploadId=%s", n, id), body: data})
	resp.wantStatus(t, fmt.Sprintf("upload part %d", n), http.StatusOK)
	if got := resp.header.Get("ETag"); got != s3TestMD5ETag(data) {
		t.Fatalf("part %d ETag = %s; want %s", n, got, s3TestMD5ETag(data))
	}
	return resp.header.Get("ETag")
}

// s3TestCompleteXML returns a CompleteMultipartUpload body listing part numbers with ETags.
func s3TestCompleteXML(parts map[int]string, order ...int) []byte {
	var b strings.Builder
	b.WriteString(`<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for _, n := range order {
		fmt.Fprintf(&b, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", n, parts[n])
	}
	b.WriteString("</CompleteMultipartUpload>")
	return []byte(b.String())
}

// TestS3Multipart runs multipart uploads through completion, validation failures and abort.
func TestS3Multipart(t *testing.T) {
	e := newS3TestEnv(t)
	key := "videos/big movie.mp4"
	id := e.multipartUpload(t, key, map[string]string{"Content-Type": "video/mp4", "X-Amz-Meta-Camera": "x100"})
	data := [][]byte{
		bytes.Repeat([]byte{'1'}, s3MinPartSize),
		bytes.Repeat([]byte{'2'}, s3MinPartSize+7),
		[]byte("tail"),
	}
	etags := map[int]string{}
	for i, d := range data {
		etags[i+1] = e.uploadPart(t, key, id, i+1, d)
	}
	// Re-uploading a part replaces it.
	data[2] = []byte("the real tail")
	etags[3] = e.uploadPart(t, key, id, 3, data[2])

	resp := e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath(key), query: "max-parts=2&uploadId=" + id})
	resp.wantStatus(t, "list parts", http.StatusOK)
	var parts struct {
		IsTruncated          bool
		NextPartNumberMarker int
		Part                 []struct {
			PartNumber int
			ETag       string
			Size       int64
		}
	}
	if err := xml.Unmarshal(resp.body, &parts); err != nil {
		t.Fatal(err)
	}
	if !parts.IsTruncated || parts.NextPartNumberMarker != 2 || len(parts.Part) != 2 || parts.Part[1].Size != int64(len(data[1])) || parts.Part[0].ETag != etags[1] {
		t.Errorf("list parts page 1 = %+v", parts)
	}
	resp = e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath(key), query: "part-number-marker=2&uploadId=" + id})
	parts.Part = nil
	if err := xml.Unmarshal(resp.body, &parts); err != nil {
		t.Fatal(err)
	}
	if parts.IsTruncated || len(parts.Part) != 1 || parts.Part[0].PartNumber != 3 || parts.Part[0].ETag != etags[3] {
		t.Errorf("list parts page 2 = %+v", parts)
	}

	complete := func(body []byte) s3TestResponse {
		return e.do(t, s3TestRequest{method: "POST", path: s3TestKeyPath(key), query: "uploadId=" + id, body: body})
	}
	complete(s3TestCompleteXML(etags, 2, 1, 3)).wantError(t, "parts out of order", http.StatusBadRequest, "InvalidPartOrder")
	complete(s3TestCompleteXML(map[int]string{1: etags[1], 2: `"00000000000000000000000000000000"`, 3: etags[3]}, 1, 2, 3)).wantError(t, "wrong ETag", http.StatusBadRequest, "InvalidPart")
	complete(s3TestCompleteXML(etags, 1, 2, 4)).wantError(t, "missing part", http.StatusBadRequest, "InvalidPart")
	complete(s3TestCompleteXML(etags, 1, 3, 2)).wantError(t, "order", http.StatusBadRequest, "InvalidPartOrder")
	complete(s3TestCompleteXML(etags)).wantError(t, "no parts", http.StatusBadRequest, "MalformedXML")
	complete([]byte("<not xml")).wantError(t, "bad xml", http.StatusBadRequest, "MalformedXML")
	e.do(t, s3TestRequest{method: "HEAD", path: s3TestKeyPath(key)}).wantStatus(t, "object before completion", http.StatusNotFound)

	resp = complete(s3TestCompleteXML(etags, 1, 2, 3))
	resp.wantStatus(t, "complete", http.StatusOK)
	var done struct{ Bucket, Key, ETag string }
	if err := xml.Unmarshal(resp.body, &done); err != nil {
		t.Fatal(err)
	}
	cat := md5.New()
	for _, d := range data {
		sum := md5.Sum(d)
		cat.Write(sum[:])
	}
	wantETag := fmt.Sprintf(`"%x-3"`, cat.Sum(nil))
	if done.ETag != wantETag || done.Key != key || done.Bucket != "bucket" {
		t.Errorf("complete = %+v; want ETag %s", done, wantETag)
	}
	got := e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath(key)})
	if !bytes.Equal(got.body, bytes.Join(data, nil)) || got.header.Get("ETag") != wantETag ||
		got.header.Get("Content-Type") != "video/mp4" || got.header.Get("X-Amz-Meta-Camera") != "x100" {
		t.Errorf("completed object: %d bytes, ETag %s, type %q, camera %q", len(got.body), got.header.Get("ETag"), got.header.Get("Content-Type"), got.header.Get("X-Amz-Meta-Camera"))
	}
	if entries, _ := os.ReadDir(filepath.Join(e.root, s3UploadsDir)); len(entries) != 0 {
		t.Errorf("upload directories left after completion: %v", entries)
	}
	complete(s3TestCompleteXML(etags, 1, 2, 3)).wantError(t, "complete twice", http.StatusNotFound, "NoSuchUpload")

	// Small parts before the last one are refused; abort discards the upload.
	small := e.multipartUpload(t, "small", nil)
	smallTags := map[int]string{1: e.uploadPart(t, "small", small, 1, []byte("a")), 2: e.uploadPart(t, "small", small, 2, []byte("b"))}
	e.do(t, s3TestRequest{method: "POST", path: "/bucket/small", query: "uploadId=" + small, body: s3TestCompleteXML(smallTags, 1, 2)}).wantError(t, "small part", http.StatusBadRequest, "EntityTooSmall")
	e.do(t, s3TestRequest{method: "GET", path: "/bucket/other", query: "uploadId=" + small}).wantError(t, "upload of another key", http.StatusNotFound, "NoSuchUpload")
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/small", query: "partNumber=0&uploadId=" + small, body: []byte("x")}).wantError(t, "part 0", http.StatusBadRequest, "InvalidArgument")
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/small", query: "partNumber=10001&uploadId=" + small, body: []byte("x")}).wantError(t, "part 10001", http.StatusBadRequest, "InvalidArgument")
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/small", query: "uploadId=" + small}).wantStatus(t, "abort", http.StatusNoContent)
	e.do(t, s3TestRequest{method: "PUT", path: "/bucket/small", query: "partNumber=3&uploadId=" + small, body: []byte("c")}).wantError(t, "part after abort", http.StatusNotFound, "NoSuchUpload")
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/small", query: "uploadId=" + small}).wantError(t, "abort twice", http.StatusNotFound, "NoSuchUpload")
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/small", query: "uploadId=..%2F..%2Fbucket"}).wantError(t, "traversing upload id", http.StatusNotFound, "NoSuchUpload")
	e.assertNoLeftovers(t)
}

// s3TestUploads is a parsed ListMultipartUploads response.
type s3TestUploads struct {
	KeyMarker          string
	UploadIdMarker     string
	NextKeyMarker      string
	NextUploadIdMarker string
	Prefix             string
	Delimiter          string
	MaxUploads         int
	IsTruncated        bool
	Upload             []struct {
		Key       string
		UploadId  string
		Initiated string
		Owner     struct{ ID string }
	}
	CommonPrefixes []struct{ Prefix string }
}

// items returns the page's uploads as "key@id" and its common prefixes, in order of the
// response.
func (res s3TestUploads) items() []string {
	var items []string
	for _, u := range res.Upload {
		items = append(items, u.Key+"@"+u.UploadId)
	}
	for _, p := range res.CommonPrefixes {
		items = append(items, p.Prefix)
	}
	return items
}

// listUploads sends ListMultipartUploads with query (encoded, without "uploads") and parses the
// answer, failing the test unless it is 200.
func (e *s3TestEnv) listUploads(t *testing.T, query string) s3TestUploads {
	t.Helper()
	if query != "" {
		query = "&" + query
	}
	resp := e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "uploads" + query})
	resp.wantStatus(t, "list multipart uploads "+query, http.StatusOK)
	var res s3TestUploads
	if err := xml.Unmarshal(resp.body, &res); err != nil {
		t.Fatalf("list multipart uploads %s: %v\n%s", query, err, resp.body)
	}
	if !bytes.Contains(resp.body, []byte(`<ListMultipartUploadsResult xmlns="`+s3XMLNamespace+`">`)) {
		t.Errorf("list multipart uploads %s: root element or namespace wrong:\n%s", query, resp.body)
	}
	return res
}

// TestS3ListMultipartUploads checks ListMultipartUploads: filters, markers, paging and limits.
func TestS3ListMultipartUploads(t *testing.T) {
	e := newS3TestEnv(t)
	if got := e.listUploads(t, ""); len(got.items()) != 0 || got.IsTruncated || got.MaxUploads != s3MaxListKeys {
		t.Fatalf("no uploads: %+v", got)
	}
	ids := map[string]string{} // "key#n" -> id
	for _, key := range []string{"a/1", "a/1", "a/2", "b", "c/x/y", "d", "sp ace/é"} {
		name := key + "#1"
		if ids[name] != "" {
			name = key + "#2"
		}
		ids[name] = e.multipartUpload(t, key, nil)
	}
	e.do(t, s3TestRequest{method: "PUT", path: "/other"}).wantStatus(t, "create bucket", http.StatusOK)
	e.do(t, s3TestRequest{method: "POST", path: "/other/a/1", query: "uploads"}).wantStatus(t, "upload in another bucket", http.StatusOK)
	a1 := []string{ids["a/1#1"], ids["a/1#2"]}
	slices.Sort(a1) // uploads of one key are listed by id
	all := []string{"a/1@" + a1[0], "a/1@" + a1[1], "a/2@" + ids["a/2#1"], "b@" + ids["b#1"], "c/x/y@" + ids["c/x/y#1"], "d@" + ids["d#1"], "sp ace/é@" + ids["sp ace/é#1"]}

	tests := []struct {
		name      string
		query     string
		want      []string
		truncated bool
	}{
		{"all", "", all, false},
		{"prefix", "prefix=a%2F", all[:3], false},
		{"delimiter", "delimiter=%2F", []string{"b@" + ids["b#1"], "d@" + ids["d#1"], "a/", "c/", "sp ace/"}, false},
		{"prefix and delimiter", "delimiter=%2F&prefix=c%2F", []string{"c/x/"}, false},
		{"key marker", "key-marker=a%2F1", all[2:], false},
		{"key and upload id markers", "key-marker=a%2F1&upload-id-marker=" + a1[0], all[1:], false},
		{"upload id marker without key marker", "upload-id-marker=" + a1[0], all, false},
		{"max uploads", "max-uploads=2", all[:2], true},
		{"max uploads with a prefix rolled up", "delimiter=%2F&max-uploads=1", []string{"a/"}, true},
		{"max uploads zero", "max-uploads=0", nil, false},
		{"no match", "prefix=zzz", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.listUploads(t, tt.query)
			if !slices.Equal(got.items(), tt.want) || got.IsTruncated != tt.truncated {
				t.Errorf("list %q = %q (truncated %v); want %q (truncated %v)", tt.query, got.items(), got.IsTruncated, tt.want, tt.truncated)
			}
		})
	}

	// Paging one item at a time, with and without a delimiter, visits every item once.
	for _, delimiter := range []string{"", "/"} {
		var items []string
		query := "max-uploads=1&delimiter=" + url.QueryEscape(delimiter)
		for page := 0; ; page++ {
			if page > 20 {
				t.Fatalf("delimiter %q: more than 20 pages", delimiter)
			}
			got := e.listUploads(t, query)
			items = append(items, got.items()...)
			if !got.IsTruncated {
				break
			}
			if got.NextKeyMarker == "" {
				t.Fatalf("delimiter %q: truncated page without NextKeyMarker: %+v", delimiter, got)
			}
			query = "max-uploads=1&delimiter=" + url.QueryEscape(delimiter) + "&key-marker=" + url.QueryEscape(got.NextKeyMarker) + "&upload-id-marker=" + got.NextUploadIdMarker
		}
		want := all
		if delimiter != "" {
			want = []string{"a/", "b@" + ids["b#1"], "c/", "d@" + ids["d#1"], "sp ace/"}
		}
		if !slices.Equal(items, want) {
			t.Errorf("paged with delimiter %q = %q; want %q", delimiter, items, want)
		}
	}

	got := e.listUploads(t, "max-uploads=5000&prefix=b")
	if got.MaxUploads != s3MaxListKeys || len(got.Upload) != 1 || got.Upload[0].Owner.ID != "svc" || got.Prefix != "b" {
		t.Errorf("capped list = %+v", got)
	}
	if _, err := time.Parse(s3XMLTimeFormat, got.Upload[0].Initiated); err != nil {
		t.Errorf("Initiated %q: %v", got.Upload[0].Initiated, err)
	}
	if got := e.listUploads(t, "encoding-type=url&prefix=sp"); len(got.Upload) != 1 || got.Upload[0].Key != "sp%20ace/%C3%A9" {
		t.Errorf("url-encoded list = %+v", got)
	}
	// Completed and aborted uploads are no longer listed.
	e.do(t, s3TestRequest{method: "DELETE", path: "/bucket/b", query: "uploadId=" + ids["b#1"]}).wantStatus(t, "abort", http.StatusNoContent)
	etag := e.uploadPart(t, "d", ids["d#1"], 1, []byte("d"))
	e.do(t, s3TestRequest{method: "POST", path: "/bucket/d", query: "uploadId=" + ids["d#1"], body: s3TestCompleteXML(map[int]string{1: etag}, 1)}).wantStatus(t, "complete", http.StatusOK)
	if got := e.listUploads(t, "prefix=b"); len(got.Upload) != 0 {
		t.Errorf("aborted upload listed: %+v", got)
	}
	if got := e.listUploads(t, "prefix=d"); len(got.Upload) != 0 {
		t.Errorf("completed upload listed: %+v", got)
	}

	e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "max-uploads=-1&uploads"}).wantError(t, "negative max-uploads", http.StatusBadRequest, "InvalidArgument")
	e.do(t, s3TestRequest{method: "GET", path: "/bucket", query: "encoding-type=xml&uploads"}).wantError(t, "bad encoding type", http.StatusBadRequest, "InvalidArgument")
	e.do(t, s3TestRequest{method: "GET", path: "/missing", query: "uploads"}).wantError(t, "missing bucket", http.StatusNotFound, "NoSuchBucket")
}

// TestS3NewUploadID checks that upload ids have the form loadUpload accepts and sort by creation.
func TestS3NewUploadID(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	prev := ""
	for i := range 5 {
		id := s3NewUploadID(base.Add(time.Duration(i) * time.Nanosecond))
		if !s3IsUploadID(id) {
			t.Fatalf("s3NewUploadID = %q; not an upload id", id)
		}
		if id <= prev {
			t.Errorf("s3NewUploadID at +%dns = %q; want after %q", i, id, prev)
		}
		prev = id
	}
}
