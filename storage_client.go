package main

// storage_client.go: the S3 client behind `storage` of the ambient "svc" module (js_storage.go).
//
// It speaks path-style S3 over HTTP to one bucket of one endpoint (the built-in server of
// s3.go or any S3-compatible service: SVC_S3_ENDPOINT) and signs every request with SigV4
// through the primitives the server verifies with (s3CanonicalRequest, s3SigningKey). Bodies
// are signed by their SHA-256; a stream of unknown length is sent as a multipart upload of
// storagePartSize parts, so at most one part is held in memory.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits and defaults of the storage client.
const (
	// storagePartSize is the size of the parts a stream of unknown length is uploaded in, and
	// the most a stream may hold before the upload turns multipart (S3's minimum part is 5 MiB).
	storagePartSize = 8 << 20
	// storageMaxParts bounds a multipart upload (S3: 10,000 parts), so a stream holds at most
	// storagePartSize*storageMaxParts bytes (78 GiB).
	storageMaxParts = s3MaxPartNumber
	// storageDefaultPresignExpiry is how long a presigned URL stays valid unless told.
	storageDefaultPresignExpiry = time.Hour
	// storageMaxErrorBody bounds the error document read from a failed response.
	storageMaxErrorBody = 64 << 10
	// storageMaxListBody bounds a list or delete response (1,000 keys of 1 KiB fit).
	storageMaxListBody = 8 << 20
	// storageRequestTimeout bounds one request, a download's body included.
	storageRequestTimeout = 10 * time.Minute
	// storageDefaultRegion signs requests of a target that names no region.
	storageDefaultRegion = "us-east-1"
)

// storageTarget is where the storage client goes: a bucket of an S3 endpoint and the keys
// to sign with.
type storageTarget struct {
	Endpoint  string // http(s)://host[:port][/path], path-style
	Bucket    string
	Region    string // storageDefaultRegion when empty
	AccessKey string
	SecretKey string
}

// storageClient is an S3 client bound to one bucket. It is safe for concurrent use.
type storageClient struct {
	base   *url.URL // the endpoint, path without its trailing slash
	bucket string
	region string
	access string
	secret string
	http   *http.Client
	now    func() time.Time // the signing clock; tests pin it
}

// newStorageClient validates t and returns its client.
func newStorageClient(t storageTarget) (*storageClient, error) {
	u, err := url.Parse(t.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("storage: endpoint %q must be an http:// or https:// URL without query", t.Endpoint)
	}
	if err := s3CheckBucketName(t.Bucket); err != nil {
		return nil, fmt.Errorf("storage: bucket %q is not a valid S3 bucket name", t.Bucket)
	}
	if t.AccessKey == "" || t.SecretKey == "" {
		return nil, errors.New("storage: access key and secret key must be set")
	}
	if t.Region == "" {
		t.Region = storageDefaultRegion
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return &storageClient{
		base: u, bucket: t.Bucket, region: t.Region, access: t.AccessKey, secret: t.SecretKey,
		http: &http.Client{Transport: newOutboundTransport(fetchIdlePerHost), Timeout: storageRequestTimeout}, now: time.Now,
	}, nil
}

// storageError is an error answered by the S3 endpoint (its XML error document), or a
// failure to reach it (Status 0).
type storageError struct {
	Op      string // the client operation: put, get, head, list, delete, presign
	Key     string // the object key, when the operation has one
	Status  int    // HTTP status; 0 when no answer came
	Code    string // S3 error code (NoSuchKey, AccessDenied...); "NetworkError" when no answer came
	Message string
	Err     error // the transport error when Status is 0
}

// Error reads "storage get "a/b": NoSuchKey (404): The specified key does not exist.", or
// only the message for an error of no operation (not configured).
func (e *storageError) Error() string {
	if e.Op == "" {
		return e.Message
	}
	var b strings.Builder
	b.WriteString("storage " + e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	b.WriteString(": " + e.Code)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (%d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Unwrap returns the transport error.
func (e *storageError) Unwrap() error { return e.Err }

// storageIsNotFound reports whether err says the object does not exist.
func storageIsNotFound(err error) bool {
	var se *storageError
	return errors.As(err, &se) && (se.Code == "NoSuchKey" || se.Code == "NotFound")
}

// storageObject is the metadata of one object, from HeadObject, GetObject or a listing.
type storageObject struct {
	Key          string
	Size         int64 // of the whole object, also when a range was read
	ETag         string
	ContentType  string // "" in listings
	LastModified time.Time
}

// storageRange is a byte range to read: Length bytes from Offset (to the end when Length is
// 0), or, when Suffix > 0, the last Suffix bytes.
type storageRange struct {
	Offset, Length, Suffix int64
}

// header returns the Range header value.
func (r storageRange) header() string {
	switch {
	case r.Suffix > 0:
		return "bytes=-" + strconv.FormatInt(r.Suffix, 10)
	case r.Length > 0:
		return fmt.Sprintf("bytes=%d-%d", r.Offset, r.Offset+r.Length-1)
	}
	return fmt.Sprintf("bytes=%d-", r.Offset)
}

// storageBody is the body of a GetObject: the object's bytes, or the range's.
type storageBody struct {
	storageObject
	Range *[2]int64     // offset and length of a partial read; nil for the whole object
	Body  io.ReadCloser // the caller closes it
}

// storageListPage is one page of ListObjectsV2.
type storageListPage struct {
	Objects  []storageObject
	Prefixes []string
	Cursor   string // continuation token of the next page; "" when this is the last
}

// storageListOptions select a page of a listing.
type storageListOptions struct {
	Prefix, Delimiter, Cursor string
	Limit                     int // 1-1000; 0 for 1000
}

// objectURL returns the URL of key in the bucket, or of the bucket itself when key is "".
func (c *storageClient) objectURL(key string, query url.Values) *url.URL {
	u := *c.base
	u.Path += "/" + c.bucket
	if key != "" {
		u.Path += "/" + key
	}
	// SigV4 signs the path encoded once, each byte but the unreserved ones; the wire path is
	// that same encoding, so what the server canonicalises is what was signed.
	u.RawPath = s3URIEncode(u.Path, true)
	u.RawQuery = strings.ReplaceAll(query.Encode(), "+", "%20")
	return &u
}

// scope returns the credential scope for a day (yyyymmdd).
func (c *storageClient) scope(day string) *s3Signature {
	return &s3Signature{date: day, region: c.region, service: "s3", terminator: "aws4_request"}
}

// storageCanonical returns the canonical request of req with the given signed headers.
func storageCanonical(req *http.Request, signed []string, payloadHash string, presigned bool) s3CanonicalRequest {
	return s3CanonicalRequest{
		method: req.Method, path: s3URIEncode(req.URL.Path, true), query: s3CanonicalQuery(req.URL.RawQuery, presigned),
		headers: s3CanonicalHeaders(req, signed), signedHeaders: signed, payloadHash: payloadHash,
	}
}

// sign adds the SigV4 Authorization of req, whose body hashes to payloadHash. Every
// x-amz-* header, content-type and content-md5 set on req are signed along with host.
func (c *storageClient) sign(req *http.Request, payloadHash string) {
	now := c.now().UTC()
	amzDate := now.Format(s3AmzDateFormat)
	req.Host = req.URL.Host
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	signed := []string{"host"}
	for name := range req.Header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "x-amz-") || lower == "content-type" || lower == "content-md5" || lower == "range" {
			signed = append(signed, lower)
		}
	}
	slices.Sort(signed)
	sc := c.scope(amzDate[:8])
	key := s3SigningKey(c.secret, sc.date, sc.region, sc.service)
	sig := storageCanonical(req, signed, payloadHash, false).signature(key, amzDate, sc.scope())
	req.Header.Set("Authorization", fmt.Sprintf("%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		s3Algorithm, c.access, sc.scope(), strings.Join(signed, ";"), sig))
}

// do sends a signed request with body (nil for none) and returns the response when its
// status is one of ok; otherwise the endpoint's error as a *storageError.
func (c *storageClient) do(ctx context.Context, op, key, method string, u *url.URL, header http.Header, body []byte, ok ...int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("storage %s: %w", op, err)
	}
	req.URL = u
	for k, v := range header {
		req.Header[k] = v
	}
	payload := s3EmptySHA256
	// An empty body goes as none: net/http sends a non-nil body of length 0 chunked, without
	// Content-Length, which S3 refuses (411 MissingContentLength). A PUT or POST without a
	// body still carries "Content-Length: 0".
	if len(body) > 0 {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
	}
	c.sign(req, payload)
	span := otelStorage(ctx, op, key)
	resp, err := c.http.Do(req)
	span.endHTTP(resp, err)
	if err != nil {
		return nil, &storageError{Op: op, Key: key, Code: "NetworkError", Message: err.Error(), Err: err}
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return resp, nil
		}
	}
	defer resp.Body.Close()
	return nil, storageReadError(op, key, resp)
}

// storageReadError turns a failed response into a *storageError: the code and message of
// its XML error document, or, for a bodiless answer (HEAD), the status's usual code.
func storageReadError(op, key string, resp *http.Response) error {
	e := &storageError{Op: op, Key: key, Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, storageMaxErrorBody))
	var doc s3ErrorDocument
	if xml.Unmarshal(data, &doc) == nil && doc.Code != "" {
		e.Code, e.Message = doc.Code, doc.Message
		return e
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		e.Code = "NotFound"
	case http.StatusForbidden:
		e.Code = "AccessDenied"
	case http.StatusRequestedRangeNotSatisfiable:
		e.Code = "InvalidRange"
	default:
		e.Code = strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "")
	}
	e.Message = strings.TrimSpace(string(data))
	return e
}

// put stores body under key (PutObject) and returns its ETag, unquoted.
func (c *storageClient) put(ctx context.Context, key string, body []byte, contentType string) (etag string, err error) {
	resp, err := c.do(ctx, "put", key, http.MethodPut, c.objectURL(key, nil), contentTypeHeader(contentType), body, http.StatusOK)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return storageUnquote(resp.Header.Get("ETag")), nil
}

// contentTypeHeader returns the header carrying a content type ("" sets none).
func contentTypeHeader(contentType string) http.Header {
	if contentType == "" {
		return http.Header{}
	}
	return http.Header{"Content-Type": {contentType}}
}

// storageUnquote strips the quotes of an ETag.
func storageUnquote(etag string) string { return strings.Trim(etag, `"`) }

// putStream stores what next yields under key: each call returns the next chunk, and
// io.EOF (with no data) at the end. A stream that ends within storagePartSize bytes is one
// PutObject; a longer one is a multipart upload, aborted if anything fails. It returns the
// ETag and the total size.
func (c *storageClient) putStream(ctx context.Context, key string, next func() ([]byte, error), contentType string) (etag string, size int64, err error) {
	part, done, err := storageFill(nil, next)
	if err != nil {
		return "", 0, err
	}
	if done {
		etag, err := c.put(ctx, key, part, contentType)
		return etag, int64(len(part)), err
	}
	id, err := c.createUpload(ctx, key, contentType)
	if err != nil {
		return "", 0, err
	}
	etag, size, err = c.uploadParts(ctx, key, id, part, next)
	if err != nil {
		// The upload is abandoned either way; a failed abort leaves it to the endpoint's
		// lifecycle (the built-in server's janitor removes it after a day).
		if resp, aerr := c.do(context.WithoutCancel(ctx), "put", key, http.MethodDelete, c.objectURL(key, url.Values{"uploadId": {id}}), nil, nil, http.StatusNoContent, http.StatusOK, http.StatusNotFound); aerr == nil {
			resp.Body.Close()
		}
		return "", 0, err
	}
	return etag, size, nil
}

// storageFill appends chunks from next to buf until it holds storagePartSize bytes (the
// excess stays in it: parts may exceed the size by less than a chunk) or the stream ends
// (done).
func storageFill(buf []byte, next func() ([]byte, error)) (part []byte, done bool, err error) {
	for len(buf) < storagePartSize {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			return buf, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		buf = append(buf, chunk...)
	}
	return buf, false, nil
}

// createUpload starts a multipart upload of key and returns its id.
func (c *storageClient) createUpload(ctx context.Context, key, contentType string) (string, error) {
	resp, err := c.do(ctx, "put", key, http.MethodPost, c.objectURL(key, url.Values{"uploads": {""}}), contentTypeHeader(contentType), nil, http.StatusOK)
	if err != nil {
		return "", err
	}
	var result struct {
		UploadID string `xml:"UploadId"`
	}
	if err := storageDecode(resp, &result); err != nil || result.UploadID == "" {
		return "", &storageError{Op: "put", Key: key, Status: resp.StatusCode, Code: "MalformedResponse", Message: "CreateMultipartUpload answered no UploadId"}
	}
	return result.UploadID, nil
}

// uploadParts uploads first and the rest of the stream as the parts of upload id, then
// completes it.
func (c *storageClient) uploadParts(ctx context.Context, key, id string, first []byte, next func() ([]byte, error)) (etag string, size int64, err error) {
	var complete s3CompleteRequest
	part, done := first, false
	for n := 1; ; n++ {
		if n > storageMaxParts {
			return "", 0, &storageError{Op: "put", Key: key, Code: "EntityTooLarge", Message: fmt.Sprintf("a stream may hold at most %d bytes", int64(storagePartSize)*storageMaxParts)}
		}
		q := url.Values{"partNumber": {strconv.Itoa(n)}, "uploadId": {id}}
		resp, err := c.do(ctx, "put", key, http.MethodPut, c.objectURL(key, q), nil, part, http.StatusOK)
		if err != nil {
			return "", 0, err
		}
		resp.Body.Close()
		complete.Parts = append(complete.Parts, struct {
			PartNumber int
			ETag       string
		}{n, resp.Header.Get("ETag")})
		size += int64(len(part))
		if done {
			break
		}
		if part, done, err = storageFill(part[:0], next); err != nil {
			return "", 0, err
		}
		if done && len(part) == 0 {
			break
		}
	}
	body, err := storageXML("CompleteMultipartUpload", complete)
	if err != nil {
		return "", 0, err
	}
	resp, err := c.do(ctx, "put", key, http.MethodPost, c.objectURL(key, url.Values{"uploadId": {id}}), nil, body, http.StatusOK)
	if err != nil {
		return "", 0, err
	}
	// S3 may answer 200 and then an error document when completing fails late.
	var result struct {
		XMLName xml.Name
		ETag    string
		Code    string
		Message string
	}
	if err := storageDecode(resp, &result); err != nil {
		return "", 0, &storageError{Op: "put", Key: key, Status: resp.StatusCode, Code: "MalformedResponse", Message: err.Error()}
	}
	if result.XMLName.Local == "Error" {
		return "", 0, &storageError{Op: "put", Key: key, Status: resp.StatusCode, Code: result.Code, Message: result.Message}
	}
	return storageUnquote(result.ETag), size, nil
}

// storageXML encodes v as an S3 request document named root.
func storageXML(root string, v any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(xml.Header)
	if err := xml.NewEncoder(&b).EncodeElement(v, xml.StartElement{Name: xml.Name{Space: s3XMLNamespace, Local: root}}); err != nil {
		return nil, fmt.Errorf("storage: encode %s: %w", root, err)
	}
	return b.Bytes(), nil
}

// storageDecode reads an XML response of at most storageMaxListBody bytes into v and
// closes it.
func storageDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, storageMaxListBody+1))
	if err != nil {
		return err
	}
	if len(data) > storageMaxListBody {
		return fmt.Errorf("response larger than %d bytes", storageMaxListBody)
	}
	return xml.Unmarshal(data, v)
}

// get reads key, or the range of it when rng is not nil (GetObject); a missing key is an
// error for which storageIsNotFound reports true.
func (c *storageClient) get(ctx context.Context, key string, rng *storageRange) (*storageBody, error) {
	h := http.Header{}
	if rng != nil {
		h.Set("Range", rng.header())
	}
	resp, err := c.do(ctx, "get", key, http.MethodGet, c.objectURL(key, nil), h, nil, http.StatusOK, http.StatusPartialContent)
	if err != nil {
		return nil, err
	}
	b := &storageBody{storageObject: storageObjectOf(key, resp), Body: resp.Body}
	if resp.StatusCode == http.StatusPartialContent {
		var first, last, total int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &total); err == nil {
			b.Size, b.Range = total, &[2]int64{first, last - first + 1}
		}
	}
	return b, nil
}

// storageObjectOf reads an object's metadata from the headers of a GetObject or HeadObject.
func storageObjectOf(key string, resp *http.Response) storageObject {
	modified, _ := http.ParseTime(resp.Header.Get("Last-Modified"))
	return storageObject{
		Key: key, Size: resp.ContentLength, ETag: storageUnquote(resp.Header.Get("ETag")),
		ContentType: resp.Header.Get("Content-Type"), LastModified: modified,
	}
}

// head returns key's metadata (HeadObject).
func (c *storageClient) head(ctx context.Context, key string) (storageObject, error) {
	resp, err := c.do(ctx, "head", key, http.MethodHead, c.objectURL(key, nil), nil, nil, http.StatusOK)
	if err != nil {
		return storageObject{}, err
	}
	resp.Body.Close()
	return storageObjectOf(key, resp), nil
}

// list returns one page of the bucket's keys (ListObjectsV2). Keys travel URL-encoded
// (encoding-type=url), so keys that XML 1.0 cannot carry list too.
func (c *storageClient) list(ctx context.Context, o storageListOptions) (*storageListPage, error) {
	q := url.Values{"list-type": {"2"}, "encoding-type": {"url"}}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.Delimiter != "" {
		q.Set("delimiter", o.Delimiter)
	}
	if o.Cursor != "" {
		q.Set("continuation-token", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("max-keys", strconv.Itoa(o.Limit))
	}
	resp, err := c.do(ctx, "list", "", http.MethodGet, c.objectURL("", q), nil, nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var result s3ListResult
	if err := storageDecode(resp, &result); err != nil {
		return nil, &storageError{Op: "list", Status: resp.StatusCode, Code: "MalformedResponse", Message: err.Error()}
	}
	decode := func(s string) string {
		if result.EncodingType != "url" {
			return s
		}
		if d, err := url.QueryUnescape(s); err == nil {
			return d
		}
		return s
	}
	page := &storageListPage{}
	for _, e := range result.Contents {
		modified, _ := time.Parse(time.RFC3339Nano, e.LastModified)
		page.Objects = append(page.Objects, storageObject{Key: decode(e.Key), Size: e.Size, ETag: storageUnquote(e.ETag), LastModified: modified})
	}
	for _, p := range result.CommonPrefixes {
		page.Prefixes = append(page.Prefixes, decode(p.Prefix))
	}
	if result.IsTruncated {
		page.Cursor = result.NextContinuationToken
	}
	return page, nil
}

// delete removes key (DeleteObject); a missing key is no error.
func (c *storageClient) delete(ctx context.Context, key string) error {
	resp, err := c.do(ctx, "delete", key, http.MethodDelete, c.objectURL(key, nil), nil, nil, http.StatusNoContent, http.StatusOK)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// deleteMany removes keys, s3MaxDeleteObjects per DeleteObjects request; the first key the
// endpoint could not remove is the error.
func (c *storageClient) deleteMany(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), s3MaxDeleteObjects)]
		keys = keys[len(batch):]
		var req s3DeleteRequest
		req.Quiet = true
		for _, k := range batch {
			req.Objects = append(req.Objects, struct{ Key string }{k})
		}
		body, err := storageXML("Delete", req)
		if err != nil {
			return err
		}
		sum := md5.Sum(body)
		h := http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(sum[:])}}
		resp, err := c.do(ctx, "delete", "", http.MethodPost, c.objectURL("", url.Values{"delete": {""}}), h, body, http.StatusOK)
		if err != nil {
			return err
		}
		var result s3DeleteResult
		if err := storageDecode(resp, &result); err != nil {
			return &storageError{Op: "delete", Status: resp.StatusCode, Code: "MalformedResponse", Message: err.Error()}
		}
		if len(result.Errors) > 0 {
			e := result.Errors[0]
			return &storageError{Op: "delete", Key: e.Key, Status: resp.StatusCode, Code: e.Code, Message: e.Message}
		}
	}
	return nil
}

// presign returns a URL that lets its holder do method (GET or PUT) on key for expires
// (1 s to 7 days) without keys; only host is signed, so a PUT may carry any content type.
func (c *storageClient) presign(method, key string, expires time.Duration) (string, error) {
	if expires < time.Second || expires > s3MaxPresignExpiry {
		return "", fmt.Errorf("storage presign: expiry must be between 1 second and 7 days, not %v", expires)
	}
	now := c.now().UTC()
	amzDate := now.Format(s3AmzDateFormat)
	sc := c.scope(amzDate[:8])
	q := url.Values{
		"X-Amz-Algorithm":     {s3Algorithm},
		"X-Amz-Credential":    {c.access + "/" + sc.scope()},
		"X-Amz-Date":          {amzDate},
		"X-Amz-Expires":       {strconv.Itoa(int(expires / time.Second))},
		"X-Amz-SignedHeaders": {"host"},
	}
	u := c.objectURL(key, q)
	req := &http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}}
	key4 := s3SigningKey(c.secret, sc.date, sc.region, sc.service)
	sig := storageCanonical(req, []string{"host"}, s3UnsignedPayload, true).signature(key4, amzDate, sc.scope())
	u.RawQuery += "&X-Amz-Signature=" + sig
	return u.String(), nil
}

// storageTargetOf returns the target the S3_* variables of env name (those `svc env`
// prints): S3_ENDPOINT, S3_BUCKET, S3_REGION, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY.
func storageTargetOf(env map[string]string) storageTarget {
	return storageTarget{
		Endpoint: env["S3_ENDPOINT"], Bucket: env["S3_BUCKET"], Region: env["S3_REGION"],
		AccessKey: env["S3_ACCESS_KEY_ID"], SecretKey: env["S3_SECRET_ACCESS_KEY"],
	}
}
