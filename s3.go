package main

// s3.go: the built-in S3-compatible object storage endpoint of `svc dev` (DESIGN §6).
//
// Requests are path-style (/{bucket}/{key...}) and must carry an AWS Signature Version 4, in the
// Authorization header or as a presigned query. Objects live as files under the server's root:
//
//	root/<bucket>/bucket.json        creation time of the bucket
//	root/<bucket>/k<hex key>.json    sidecar of a key of up to s3HexNameMaxKey bytes
//	root/<bucket>/h<sha256>.json     sidecar of a longer key
//	root/<bucket>/d<random>          object data, named by its sidecar
//	root/.uploads/<id>/upload.json   an in-progress multipart upload (s3_multipart.go)
//	root/.uploads/<id>/p00001.json   sidecar of part 1, its data beside it
//	root/.tmp/                       files being written; emptied when the server starts
//
// The janitor (started by start, stopped by Close) removes uploads and temporary files
// abandoned for s3StaleAge.
//
// Keys never become path components, so no key can reach outside its bucket. Every file is
// written in root/.tmp, fsynced, renamed into place and its directory fsynced. The sidecar is the
// commit point: it names the data file, so a reader sees the old object or the new one, never a
// mix, and a crash leaves at worst an unreferenced data file.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits and fixed values of the S3 endpoint; the limits are Amazon S3's own.
const (
	// s3MaxObjectSize bounds the body of one PutObject and of one UploadPart (S3: 5 GiB).
	s3MaxObjectSize = 5 << 30
	// s3MaxMultipartSize bounds an object assembled by CompleteMultipartUpload (S3: 5 TiB).
	s3MaxMultipartSize = 5 << 40
	// s3MinPartSize is the smallest size of every part but the last (S3: 5 MiB).
	s3MinPartSize = 5 << 20
	// s3MaxPartNumber is the highest part number of a multipart upload.
	s3MaxPartNumber = 10000
	// s3MaxXMLBody bounds the XML request bodies (CompleteMultipartUpload with 10000 parts fits).
	s3MaxXMLBody = 4 << 20
	// s3MaxDeleteObjects is the most keys one DeleteObjects request may name.
	s3MaxDeleteObjects = 1000
	// s3MaxKeyLength is the longest object key, in bytes of UTF-8.
	s3MaxKeyLength = 1024
	// s3MaxMetadataSize bounds the user metadata (x-amz-meta-* names and values) of an object.
	s3MaxMetadataSize = 2 << 10
	// s3MaxListKeys is the most items (keys, common prefixes, parts or uploads) one list request
	// returns, and the default.
	s3MaxListKeys = 1000
	// s3MaxClockSkew is how far a signed request's date may be from the server's clock.
	s3MaxClockSkew = 15 * time.Minute
	// s3MaxPresignExpiry is the longest validity of a presigned URL (seven days).
	s3MaxPresignExpiry = 7 * 24 * time.Hour
	// s3MaxTrailerLines bounds the trailing headers of an aws-chunked body.
	s3MaxTrailerLines = 16
	// s3StaleAge is how long a multipart upload may go without a new part, and a temporary file
	// without a write, before the janitor removes it as abandoned (the age of the common S3
	// lifecycle rule AbortIncompleteMultipartUpload, one day).
	s3StaleAge = 24 * time.Hour
	// s3JanitorInterval is the time between two sweeps of the janitor; it also sweeps at start.
	s3JanitorInterval = time.Hour
	// s3HexNameMaxKey is the longest key stored under its hex name (which keeps listing free
	// of file reads); longer keys are stored under their SHA-256 so names fit in 255 bytes.
	s3HexNameMaxKey = 120

	s3XMLNamespace       = "http://s3.amazonaws.com/doc/2006-03-01/"
	s3DefaultContentType = "binary/octet-stream"
	s3XMLTimeFormat      = "2006-01-02T15:04:05.000Z"
	s3AmzDateFormat      = "20060102T150405Z"
	s3Algorithm          = "AWS4-HMAC-SHA256"
	s3EmptySHA256        = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

	// Values of x-amz-content-sha256 besides a hex SHA-256 of the body.
	s3UnsignedPayload          = "UNSIGNED-PAYLOAD"
	s3StreamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	s3StreamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	s3StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

	s3TmpDir     = ".tmp"
	s3UploadsDir = ".uploads"
	s3BucketFile = "bucket.json"
	s3UploadFile = "upload.json"
)

// s3Error is an error answered to the client as an S3 XML error document.
type s3Error struct {
	status  int
	code    string
	message string
}

// Error returns the S3 code and message.
func (e *s3Error) Error() string { return "s3 " + e.code + ": " + e.message }

// Errors answered in more than one place.
var (
	// s3ErrSignatureV2 answers a request signed with Signature Version 2 (an Authorization
	// header "AWS key:signature", or the query parameters AWSAccessKeyId, Signature and Expires
	// on a method other than GET and HEAD). S3 answers the same code where only SigV4 is
	// accepted; the message says how to switch.
	s3ErrSignatureV2 = s3BadRequest("InvalidRequest", "svc accepts AWS Signature Version 2 only in presigned GET and HEAD URLs, and this request is signed with it otherwise. "+
		"Switch the client to Signature Version 4 (AWS4-HMAC-SHA256): for the AWS CLI run `aws configure set default.s3.signature_version s3v4`; "+
		"for s3cmd set `signature_v2 = False` in ~/.s3cfg.")

	s3ErrAccessDenied     = &s3Error{http.StatusForbidden, "AccessDenied", "Access Denied."}
	s3ErrSignature        = &s3Error{http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."}
	s3ErrNoSuchBucket     = &s3Error{http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist."}
	s3ErrNoSuchKey        = &s3Error{http.StatusNotFound, "NoSuchKey", "The specified key does not exist."}
	s3ErrNoSuchUpload     = &s3Error{http.StatusNotFound, "NoSuchUpload", "The specified multipart upload does not exist. The upload ID might be invalid, or the multipart upload might have been aborted or completed."}
	s3ErrMethodNotAllowed = &s3Error{http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource."}
	s3ErrNotImplemented   = &s3Error{http.StatusNotImplemented, "NotImplemented", "A header or query you provided implies functionality that is not implemented."}
	s3ErrMalformedXML     = &s3Error{http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema."}
	s3ErrIncompleteBody   = &s3Error{http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header."}
	s3ErrChunkedEncoding  = &s3Error{http.StatusBadRequest, "InvalidRequest", "The aws-chunked request body is malformed."}
	s3ErrEntityTooLarge   = &s3Error{http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size."}
	// s3ErrMissingContentLength answers a PutObject or UploadPart that does not say its length.
	s3ErrMissingContentLength = &s3Error{http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header."}
	s3ErrInternal             = &s3Error{http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again."}
)

// s3BadRequest returns a 400 s3Error with the given code and message.
func s3BadRequest(code, message string) *s3Error {
	return &s3Error{http.StatusBadRequest, code, message}
}

// s3Server is the S3-compatible endpoint. It owns its root directory: run one server per root.
// Build it with newS3Server; a long-lived server also runs its janitor (start, then Close).
type s3Server struct {
	root      string
	accessKey string
	secretKey string
	// logger receives the detail of internal errors; clients get a plain InternalError.
	// newS3Server sets slog.Default(); the caller may replace it before serving.
	logger *slog.Logger
	// now is the clock request dates are checked against; tests pin it.
	now func() time.Time
	// bucketMu is held shared while a sidecar is committed or removed and exclusively while a
	// bucket is deleted, so a bucket found empty stays empty until it is gone.
	bucketMu sync.RWMutex
	// stopJanitor ends the janitor (nil until start); janitorDone is closed when it has ended.
	stopJanitor context.CancelFunc
	janitorDone chan struct{}
	// nameMu serialises the commits and removals of one sidecar (striped by a hash of its
	// path), so the data a replaced sidecar named is removed exactly once and never leaks.
	nameMu [64]sync.Mutex
}

// s3Meta is a sidecar file: an object, a part of a multipart upload, or the upload itself.
type s3Meta struct {
	Key         string            `json:"key,omitempty"`
	Bucket      string            `json:"bucket,omitempty"` // uploads only
	Part        int               `json:"part,omitempty"`   // parts only
	Size        int64             `json:"size"`
	ETag        string            `json:"etag,omitempty"` // quoted, as sent in headers
	Modified    time.Time         `json:"modified"`
	Data        string            `json:"data,omitempty"` // data file in the sidecar's directory
	ContentType string            `json:"contentType,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`  // stored standard headers, canonical names
	Metadata    map[string]string `json:"metadata,omitempty"` // x-amz-meta-<name>, lower-case names
}

// s3NewChecksum returns a hash for an x-amz-checksum-<name> algorithm, or nil for a name
// that is not one.
func s3NewChecksum(name string) hash.Hash {
	switch name {
	case "crc32":
		return crc32.NewIEEE()
	case "crc32c":
		return crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case "crc64nvme":
		// CRC-64/NVME: reflected polynomial 0x9a6c9329ac4bc9b5; crc64 inverts in and out.
		return crc64.New(crc64.MakeTable(0x9a6c9329ac4bc9b5))
	case "sha1":
		return sha1.New()
	case "sha256":
		return sha256.New()
	}
	return nil
}

// newS3Server returns the S3-compatible handler storing objects under root (created if missing).
// Requests must be signed with SigV4 for accessKey/secretKey; the region is taken from each
// request's credential scope, whatever it is.
func newS3Server(root, accessKey, secretKey string) (*s3Server, error) {
	if accessKey == "" || secretKey == "" {
		return nil, errors.New("new s3 server: access key and secret key must not be empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("new s3 server %q: %w", root, err)
	}
	s := &s3Server{root: abs, accessKey: accessKey, secretKey: secretKey, logger: slog.Default(), now: time.Now}
	// Files left in the temporary directory by a crash are referenced by nothing.
	if err := os.RemoveAll(s.tmpDir()); err != nil {
		return nil, fmt.Errorf("new s3 server: clear %q: %w", s.tmpDir(), err)
	}
	for _, dir := range []string{abs, s.tmpDir(), s.uploadsDir()} {
		if err := os.MkdirAll(dir, privateDirMode); err != nil {
			return nil, fmt.Errorf("new s3 server: %w", err)
		}
	}
	return s, nil
}

// ensureBucket creates the bucket name if it does not exist yet.
func (s *s3Server) ensureBucket(name string) error {
	if err := s3CheckBucketName(name); err != nil {
		return fmt.Errorf("ensure bucket %q: %w", name, err)
	}
	if s.bucketExists(name) {
		return nil
	}
	if err := s.createBucket(name); err != nil && !s.bucketExists(name) {
		return fmt.Errorf("ensure bucket %q: %w", name, err)
	}
	return nil
}

// tmpDir is where files are written before they are renamed into place.
func (s *s3Server) tmpDir() string { return filepath.Join(s.root, s3TmpDir) }

// uploadsDir holds one directory per in-progress multipart upload.
func (s *s3Server) uploadsDir() string { return filepath.Join(s.root, s3UploadsDir) }

// bucketDir is the directory of a bucket whose name passed s3CheckBucketName.
func (s *s3Server) bucketDir(bucket string) string { return filepath.Join(s.root, bucket) }

// bucketExists reports whether the bucket's directory exists.
func (s *s3Server) bucketExists(bucket string) bool {
	fi, err := os.Stat(s.bucketDir(bucket))
	return err == nil && fi.IsDir()
}

// ServeHTTP authenticates and answers one S3 request.
func (s *s3Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := strings.ToUpper(randomID("", 8))
	w.Header().Set("x-amz-request-id", requestID)
	err := s.authenticate(r)
	if err == nil {
		err = s.route(w, r)
	}
	if err == nil {
		return
	}
	var se *s3Error
	if !errors.As(err, &se) {
		s.logger.Error("s3 request failed", "method", r.Method, "path", r.URL.Path, "request_id", requestID, "err", err)
		se = s3ErrInternal
	}
	s3WriteXML(w, se.status, s3ErrorDocument{Code: se.code, Message: se.message, Resource: r.URL.Path, RequestID: requestID})
}

// route is the routing table: S3 selects an operation by method, path depth and query
// subresource, which ServeMux patterns cannot express (and ServeMux would clean keys such as
// "a//b"), so the table is this switch. Handlers return errors only before they write.
func (s *s3Server) route(w http.ResponseWriter, r *http.Request) error {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	if bucket == "" {
		if r.Method == http.MethodGet {
			return s.handleListBuckets(w)
		}
		return s3ErrMethodNotAllowed
	}
	if err := s3CheckBucketName(bucket); err != nil {
		return err
	}
	if key == "" && r.Method == http.MethodGet {
		for _, u := range s3UnsetBucketConfigs {
			if q.Has(u.subresource) {
				return s.handleUnsetBucketConfig(w, bucket, u)
			}
		}
	}
	// S3 subresources not implemented here are refused rather than mistaken for plain requests.
	for _, sub := range []string{
		"accelerate", "acl", "analytics", "attributes", "cors", "encryption", "intelligent-tiering",
		"inventory", "legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock",
		"ownershipControls", "policy", "policyStatus", "publicAccessBlock", "replication",
		"requestPayment", "restore", "retention", "select", "tagging", "torrent", "versioning",
		"versions", "website",
	} {
		if q.Has(sub) {
			return s3ErrNotImplemented
		}
	}
	if key == "" {
		switch {
		case r.Method == http.MethodGet && q.Has("location"):
			return s.handleGetBucketLocation(w, bucket)
		case r.Method == http.MethodGet && q.Has("uploads"):
			return s.handleListMultipartUploads(w, r, bucket)
		case r.Method == http.MethodGet:
			return s.handleListObjects(w, r, bucket)
		case r.Method == http.MethodHead:
			return s.handleHeadBucket(w, bucket)
		case r.Method == http.MethodPut:
			return s.handleCreateBucket(w, r, bucket)
		case r.Method == http.MethodDelete:
			return s.handleDeleteBucket(w, bucket)
		case r.Method == http.MethodPost && q.Has("delete"):
			return s.handleDeleteObjects(w, r, bucket)
		}
		return s3ErrMethodNotAllowed
	}
	if err := s3CheckKey(key); err != nil {
		return err
	}
	upload := q.Has("uploadId")
	switch {
	case r.Method == http.MethodGet && upload:
		return s.handleListParts(w, r, bucket, key)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return s.handleGetObject(w, r, bucket, key)
	case r.Method == http.MethodPut && upload:
		return s.handleUploadPart(w, r, bucket, key)
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		return s.handleCopyObject(w, r, bucket, key)
	case r.Method == http.MethodPut:
		return s.handlePutObject(w, r, bucket, key)
	case r.Method == http.MethodDelete && upload:
		return s.handleAbortMultipartUpload(w, r, bucket, key)
	case r.Method == http.MethodDelete:
		return s.handleDeleteObject(w, bucket, key)
	case r.Method == http.MethodPost && q.Has("uploads"):
		return s.handleCreateMultipartUpload(w, r, bucket, key)
	case r.Method == http.MethodPost && upload:
		return s.handleCompleteMultipartUpload(w, r, bucket, key)
	}
	return s3ErrMethodNotAllowed
}

// s3CheckBucketName validates a bucket name by S3's naming rules, which also keeps it a plain
// directory name (no "..", no separators, no leading dot).
func s3CheckBucketName(name string) error {
	bad := &s3Error{http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid."}
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") || net.ParseIP(name) != nil ||
		strings.HasPrefix(name, "xn--") || strings.HasSuffix(name, "-s3alias") {
		return bad
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(name)-1 || c != '.' && c != '-') {
			return bad
		}
	}
	return nil
}

// s3CheckKey validates an object key: UTF-8, at most s3MaxKeyLength bytes, and no path
// traversal (a leading "/", a "." or ".." segment, a NUL) even though keys never name files.
func s3CheckKey(key string) error {
	if len(key) > s3MaxKeyLength {
		return s3BadRequest("KeyTooLongError", "Your key is too long.")
	}
	if !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		return s3BadRequest("InvalidArgument", "Object keys must be valid UTF-8 without NUL characters.")
	}
	if strings.HasPrefix(key, "/") || slices.ContainsFunc(strings.Split(key, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		return s3BadRequest("InvalidArgument", "Object keys must not be absolute or contain \".\" or \"..\" segments.")
	}
	return nil
}

// s3ErrorDocument is the XML body of an error response.
type s3ErrorDocument struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string
	Message   string
	Resource  string
	RequestID string `xml:"RequestId"`
}

// s3WriteXML answers with status and v as an XML document.
func s3WriteXML(w http.ResponseWriter, status int, v any) {
	body, err := xml.Marshal(v)
	if err != nil {
		// Only a programming error (an unmarshalable type) gets here.
		http.Error(w, "s3: encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(body)))
	w.WriteHeader(status)
	io.WriteString(w, xml.Header)
	w.Write(body)
}

// s3ReadXML decodes an XML request body of at most s3MaxXMLBody bytes into v. An empty body
// leaves v alone and reports false.
func s3ReadXML(r *http.Request, v any) (bool, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, s3MaxXMLBody+1))
	if err != nil {
		return false, s3ReadError(err)
	}
	if len(data) > s3MaxXMLBody {
		return false, s3BadRequest("MaxMessageLengthExceeded", "Your request was too big.")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return false, nil
	}
	if err := xml.Unmarshal(data, v); err != nil {
		return false, s3ErrMalformedXML
	}
	return true, nil
}

// s3ReadError maps an error reading a request body to the answer: the body verifiers' own
// errors as they are, a short body as IncompleteBody.
func s3ReadError(err error) error {
	var se *s3Error
	if errors.As(err, &se) {
		return se
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return s3ErrIncompleteBody
	}
	return fmt.Errorf("read request body: %w", err)
}

// spool copies src into a new temporary file and fsyncs it, failing with EntityTooLarge past
// limit bytes. It returns the file's path (the caller renames or removes it), the byte count
// and the MD5; the extra hashes see the same bytes.
func (s *s3Server) spool(src io.Reader, limit int64, extra ...hash.Hash) (path string, size int64, sum []byte, err error) {
	f, err := os.CreateTemp(s.tmpDir(), "data-*")
	if err != nil {
		return "", 0, nil, fmt.Errorf("spool: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := md5.New()
	writers := []io.Writer{f, h}
	for _, e := range extra {
		writers = append(writers, e)
	}
	// Tell read errors (the client's or the verifiers') from write errors (ours).
	body := &s3ErrReader{r: io.LimitReader(src, limit+1)}
	n, err := io.Copy(io.MultiWriter(writers...), body)
	if body.err != nil {
		return "", 0, nil, s3ReadError(body.err)
	}
	if err != nil {
		return "", 0, nil, fmt.Errorf("spool %q: %w", f.Name(), err)
	}
	if n > limit {
		return "", 0, nil, s3ErrEntityTooLarge
	}
	if err := f.Sync(); err != nil {
		return "", 0, nil, fmt.Errorf("spool %q: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return "", 0, nil, fmt.Errorf("spool %q: %w", f.Name(), err)
	}
	return f.Name(), n, h.Sum(nil), nil
}

// s3ErrReader remembers the error of the reader it wraps, other than io.EOF.
type s3ErrReader struct {
	r   io.Reader
	err error
}

// Read reads from the wrapped reader.
func (e *s3ErrReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// writeTemp writes data to a new fsynced temporary file and returns its path.
func (s *s3Server) writeTemp(data []byte) (string, error) {
	path, _, _, err := s.spool(bytes.NewReader(data), int64(len(data)))
	return path, err
}

// nameLock returns the stripe of nameMu guarding the sidecar at path.
func (s *s3Server) nameLock(path string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(path))
	return &s.nameMu[h.Sum32()%uint32(len(s.nameMu))]
}

// s3ReadMeta reads a sidecar file.
func s3ReadMeta(path string) (*s3Meta, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &s3Meta{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("read sidecar %q: %w", path, err)
	}
	return m, nil
}

// commit makes meta the content of the sidecar dir/name. The spooled file tmpData, if any, is
// first moved into dir under a fresh name that meta records; then the sidecar is renamed over
// the old one (the commit point) and the data the old sidecar named is removed. Every rename
// is followed by an fsync of dir. A missing dir yields an fs.ErrNotExist error. check, when
// not nil, sees the sidecar being replaced (nil for none) under the name's lock, so a
// conditional write's test and its commit are one step; its error aborts the commit.
func (s *s3Server) commit(dir, name string, meta *s3Meta, tmpData string, check func(old *s3Meta) error) (err error) {
	if tmpData != "" {
		meta.Data = "d" + randomID("", 16)
		data := filepath.Join(dir, meta.Data)
		if err := os.Rename(tmpData, data); err != nil {
			os.Remove(tmpData)
			return fmt.Errorf("commit %q: %w", name, err)
		}
		defer func() {
			if err != nil {
				os.Remove(data)
			}
		}()
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("commit %q: %w", name, err)
		}
	}
	encoded, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("commit %q: %w", name, err)
	}
	tmpMeta, err := s.writeTemp(encoded)
	if err != nil {
		return fmt.Errorf("commit %q: %w", name, err)
	}
	path := filepath.Join(dir, name)
	s.bucketMu.RLock()
	mu := s.nameLock(path)
	mu.Lock()
	old, _ := s3ReadMeta(path)
	if check != nil {
		err = check(old)
	}
	if err == nil {
		if err = os.Rename(tmpMeta, path); err == nil {
			err = syncDir(dir)
		}
	}
	mu.Unlock()
	s.bucketMu.RUnlock()
	var se *s3Error
	if errors.As(err, &se) {
		os.Remove(tmpMeta)
		return err
	}
	if err != nil {
		os.Remove(tmpMeta)
		return fmt.Errorf("commit %q: %w", name, err)
	}
	if old != nil && old.Data != "" && old.Data != meta.Data {
		os.Remove(filepath.Join(dir, old.Data))
	}
	return nil
}

// remove deletes the sidecar dir/name (a missing one is not an error), then its data.
func (s *s3Server) remove(dir, name string) error {
	path := filepath.Join(dir, name)
	s.bucketMu.RLock()
	mu := s.nameLock(path)
	mu.Lock()
	old, err := s3ReadMeta(path)
	if err == nil {
		err = os.Remove(path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	mu.Unlock()
	s.bucketMu.RUnlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %q: %w", path, err)
	}
	if old.Data != "" {
		os.Remove(filepath.Join(dir, old.Data))
	}
	return nil
}

// createDir atomically creates the directory parent/name holding one file, file, with content:
// it is built in the temporary directory and renamed into place.
func (s *s3Server) createDir(parent, name, file string, content []byte) error {
	tmp, err := os.MkdirTemp(s.tmpDir(), "dir-*")
	if err != nil {
		return fmt.Errorf("create directory %q: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	f, err := os.OpenFile(filepath.Join(tmp, file), os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFileMode)
	if err != nil {
		return fmt.Errorf("create directory %q: %w", name, err)
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(parent, name))
	}
	if err == nil {
		err = syncDir(parent)
	}
	if err != nil {
		return fmt.Errorf("create directory %q: %w", name, err)
	}
	return nil
}

// discardDir makes parent/name disappear at once (renamed into the temporary directory,
// parent fsynced), then deletes its files.
func (s *s3Server) discardDir(parent, name string) error {
	trash := filepath.Join(s.tmpDir(), "trash-"+randomID("", 8))
	if err := os.Rename(filepath.Join(parent, name), trash); err != nil {
		return fmt.Errorf("discard %q: %w", name, err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("discard %q: %w", name, err)
	}
	return os.RemoveAll(trash)
}

// s3ObjectName is the sidecar file name of key within its bucket directory: "k" and the key in
// hex (which sorts like the key), or "h" and its SHA-256 for keys too long for a file name.
func s3ObjectName(key string) string {
	if len(key) <= s3HexNameMaxKey {
		return "k" + hex.EncodeToString([]byte(key)) + ".json"
	}
	sum := sha256.Sum256([]byte(key))
	return "h" + hex.EncodeToString(sum[:]) + ".json"
}

// s3PartName is the sidecar file name of a part within its upload directory.
func s3PartName(part int) string { return fmt.Sprintf("p%05d.json", part) }

// missing returns notFound, or NoSuchBucket when the bucket itself is gone.
func (s *s3Server) missing(bucket string, notFound error) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	return notFound
}

// openObject returns an object's sidecar and its open data file. Data files are never
// modified, so what is read through the file stays consistent with the sidecar.
func (s *s3Server) openObject(bucket, key string) (*s3Meta, *os.File, error) {
	dir := s.bucketDir(bucket)
	for range 3 {
		meta, err := s3ReadMeta(filepath.Join(dir, s3ObjectName(key)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, s.missing(bucket, s3ErrNoSuchKey)
		}
		if err != nil {
			return nil, nil, err
		}
		f, err := os.Open(filepath.Join(dir, meta.Data))
		if err == nil {
			return meta, f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("open object %q: %w", key, err)
		}
		// The object was replaced between reading its sidecar and opening its data.
	}
	return nil, nil, fmt.Errorf("open object %q: replaced while being read, three times", key)
}

// s3MetaFromHeaders sets an object's content type, the standard headers it keeps and returns,
// and its user metadata from request headers.
func s3MetaFromHeaders(h http.Header, m *s3Meta) error {
	m.ContentType = h.Get("Content-Type")
	if m.ContentType == "" {
		m.ContentType = s3DefaultContentType
	}
	m.Headers, m.Metadata = nil, nil
	for _, name := range []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Expires"} {
		v := h.Get(name)
		if name == "Content-Encoding" {
			// aws-chunked describes the request body, not the object.
			v = strings.Join(slices.DeleteFunc(strings.Split(v, ","), func(e string) bool {
				e = strings.TrimSpace(e)
				return e == "" || strings.EqualFold(e, "aws-chunked")
			}), ",")
		}
		if v != "" {
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[name] = v
		}
	}
	size := 0
	for name, values := range h {
		lower := strings.ToLower(name)
		if meta, ok := strings.CutPrefix(lower, "x-amz-meta-"); ok && meta != "" {
			if m.Metadata == nil {
				m.Metadata = map[string]string{}
			}
			m.Metadata[meta] = strings.Join(values, ",")
			size += len(meta) + len(m.Metadata[meta])
		}
	}
	if size > s3MaxMetadataSize {
		return s3BadRequest("MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.")
	}
	return nil
}

// setObjectHeaders sets the response headers describing an object.
func (m *s3Meta) setObjectHeaders(h http.Header) {
	h.Set("ETag", m.ETag)
	h.Set("Last-Modified", m.Modified.UTC().Format(http.TimeFormat))
	h.Set("Content-Type", m.ContentType)
	h.Set("Accept-Ranges", "bytes")
	for name, v := range m.Headers {
		h.Set(name, v)
	}
	for name, v := range m.Metadata {
		h.Set("x-amz-meta-"+name, v)
	}
}

// s3BodyChecksum returns a hash for the x-amz-checksum-* algorithm a request claims for its
// body (nil if none), its name, and a function yielding the claimed base64 value: a header, or
// a trailing header of an aws-chunked body (known only once the body has been read).
func s3BodyChecksum(r *http.Request) (h hash.Hash, name string, claimed func() string) {
	trailer := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Trailer")))
	for _, name := range []string{"crc32", "crc32c", "crc64nvme", "sha1", "sha256"} {
		header := "x-amz-checksum-" + name
		if v := r.Header.Get(header); v != "" {
			return s3NewChecksum(name), name, func() string { return v }
		}
		if trailer == header {
			return s3NewChecksum(name), name, func() string { return r.Trailer.Get(header) }
		}
	}
	return nil, "", nil
}

// receive spools an object or part body of at most s3MaxObjectSize bytes, verifying
// Content-MD5 and any x-amz-checksum-* the client sent. It returns the spooled file, its size
// and MD5.
func (s *s3Server) receive(r *http.Request) (path string, size int64, sum []byte, err error) {
	// S3 needs the length before the body: a Content-Length, or for an aws-chunked body the
	// x-amz-decoded-content-length (s3WrapBody checks it). A chunked body has length -1; a
	// request with neither header has length 0 and no Content-Length.
	unknown := r.ContentLength < 0 || r.ContentLength == 0 && r.Header.Get("Content-Length") == ""
	if unknown && r.Header.Get("X-Amz-Decoded-Content-Length") == "" {
		return "", 0, nil, s3ErrMissingContentLength
	}
	var wantMD5 []byte
	if v := r.Header.Get("Content-MD5"); v != "" {
		wantMD5, err = base64.StdEncoding.DecodeString(v)
		if err != nil || len(wantMD5) != md5.Size {
			return "", 0, nil, s3BadRequest("InvalidDigest", "The Content-MD5 you specified is not valid.")
		}
	}
	declared := r.ContentLength
	if v := r.Header.Get("X-Amz-Decoded-Content-Length"); v != "" {
		declared, _ = strconv.ParseInt(v, 10, 64)
	}
	if declared > s3MaxObjectSize {
		return "", 0, nil, s3ErrEntityTooLarge
	}
	checksum, alg, claimed := s3BodyChecksum(r)
	var extra []hash.Hash
	if checksum != nil {
		extra = append(extra, checksum)
	}
	path, size, sum, err = s.spool(r.Body, s3MaxObjectSize, extra...)
	if err != nil {
		return "", 0, nil, err
	}
	switch {
	case wantMD5 != nil && !bytes.Equal(wantMD5, sum):
		err = s3BadRequest("BadDigest", "The Content-MD5 you specified did not match what we received.")
	case checksum != nil && base64.StdEncoding.EncodeToString(checksum.Sum(nil)) != claimed():
		err = s3BadRequest("BadDigest", "The "+strings.ToUpper(alg)+" you specified did not match the calculated checksum.")
	}
	if err != nil {
		os.Remove(path)
		return "", 0, nil, err
	}
	return path, size, sum, nil
}

// s3ETag returns the quoted hex ETag of an MD5.
func s3ETag(sum []byte) string { return `"` + hex.EncodeToString(sum) + `"` }

// s3XMLTime formats a time as S3's XML documents do.
func s3XMLTime(t time.Time) string { return t.UTC().Format(s3XMLTimeFormat) }

// s3ListBucketsResult is the ListBuckets response.
type s3ListBucketsResult struct {
	XMLName xml.Name `xml:"ListAllMyBucketsResult"`
	Xmlns   string   `xml:"xmlns,attr"`
	Owner   s3Owner
	Buckets struct {
		Bucket []s3Bucket // <Buckets> is sent even when empty
	}
}

// s3Owner is the single owner of every bucket.
type s3Owner struct {
	ID          string
	DisplayName string
}

// s3TheOwner is the owner of every bucket, object and upload.
var s3TheOwner = s3Owner{ID: "svc", DisplayName: "svc"}

// s3Bucket is one bucket of a ListBuckets response.
type s3Bucket struct {
	Name         string
	CreationDate string
}

// s3BucketInfo is the content of a bucket's bucket.json.
type s3BucketInfo struct {
	Created time.Time `json:"created"`
}

// handleListBuckets answers ListBuckets (GET /).
func (s *s3Server) handleListBuckets(w http.ResponseWriter) error {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return fmt.Errorf("list buckets: %w", err)
	}
	result := s3ListBucketsResult{Xmlns: s3XMLNamespace, Owner: s3TheOwner}
	for _, e := range entries {
		if !e.IsDir() || s3CheckBucketName(e.Name()) != nil {
			continue
		}
		var info s3BucketInfo
		data, err := os.ReadFile(filepath.Join(s.root, e.Name(), s3BucketFile))
		if err != nil || json.Unmarshal(data, &info) != nil {
			if fi, err := e.Info(); err == nil {
				info.Created = fi.ModTime()
			}
		}
		result.Buckets.Bucket = append(result.Buckets.Bucket, s3Bucket{Name: e.Name(), CreationDate: s3XMLTime(info.Created)})
	}
	s3WriteXML(w, http.StatusOK, result)
	return nil
}

// createBucket creates a bucket directory with its bucket.json, atomically.
func (s *s3Server) createBucket(name string) error {
	info, err := json.Marshal(s3BucketInfo{Created: s.now().UTC()})
	if err != nil {
		return fmt.Errorf("create bucket %q: %w", name, err)
	}
	return s.createDir(s.root, name, s3BucketFile, info)
}

// handleCreateBucket answers CreateBucket (PUT /{bucket}); the location constraint is ignored.
func (s *s3Server) handleCreateBucket(w http.ResponseWriter, r *http.Request, bucket string) error {
	var config struct {
		LocationConstraint string
	}
	if _, err := s3ReadXML(r, &config); err != nil {
		return err
	}
	alreadyOwned := &s3Error{http.StatusConflict, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it."}
	if s.bucketExists(bucket) {
		return alreadyOwned
	}
	if err := s.createBucket(bucket); err != nil {
		if s.bucketExists(bucket) {
			return alreadyOwned
		}
		return err
	}
	w.Header().Set("Location", "/"+bucket)
	w.WriteHeader(http.StatusOK)
	return nil
}

// handleHeadBucket answers HeadBucket (HEAD /{bucket}).
func (s *s3Server) handleHeadBucket(w http.ResponseWriter, bucket string) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// handleGetBucketLocation answers GetBucketLocation (GET /{bucket}?location): the empty
// constraint, which clients read as us-east-1.
func (s *s3Server) handleGetBucketLocation(w http.ResponseWriter, bucket string) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	s3WriteXML(w, http.StatusOK, struct {
		XMLName xml.Name `xml:"LocationConstraint"`
		Xmlns   string   `xml:"xmlns,attr"`
	}{Xmlns: s3XMLNamespace})
	return nil
}

// s3EmptyConfig is an empty configuration document, such as <VersioningConfiguration/>.
type s3EmptyConfig struct {
	XMLName xml.Name
	Xmlns   string `xml:"xmlns,attr"`
}

// s3NewEmptyConfig returns the empty configuration document named root.
func s3NewEmptyConfig(root string) s3EmptyConfig {
	return s3EmptyConfig{XMLName: xml.Name{Local: root}, Xmlns: s3XMLNamespace}
}

// s3AccessControlPolicy is the ACL of every bucket: its owner has full control.
type s3AccessControlPolicy struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Xmlns   string   `xml:"xmlns,attr"`
	Owner   s3Owner
	Grants  []s3Grant `xml:"AccessControlList>Grant"`
}

// s3Grant is one grant of an ACL.
type s3Grant struct {
	Grantee    s3Grantee
	Permission string
}

// s3Grantee is the canonical user a grant names.
type s3Grantee struct {
	XSI  string `xml:"xmlns:xsi,attr"`
	Type string `xml:"xsi:type,attr"`
	s3Owner
}

// s3UnsetBucketConfig is how S3 answers GET on a bucket subresource never configured: with
// the document doc, or else with the error err.
type s3UnsetBucketConfig struct {
	subresource string
	doc         any
	err         *s3Error
}

// s3UnsetBucketConfigs are the bucket configurations svc does not keep, answered as S3 answers
// them for a bucket where they were never set: every bucket is unversioned, owned by its one
// user, and has no lifecycle, policy, CORS, tags, object lock, encryption, website, replication,
// logging or notification. rclone, s3cmd info and the AWS CLI read some of these on common
// paths; setting any of them stays NotImplemented.
var s3UnsetBucketConfigs = []s3UnsetBucketConfig{
	{subresource: "versioning", doc: s3NewEmptyConfig("VersioningConfiguration")},
	{subresource: "logging", doc: s3NewEmptyConfig("BucketLoggingStatus")},
	{subresource: "notification", doc: s3NewEmptyConfig("NotificationConfiguration")},
	{subresource: "accelerate", doc: s3NewEmptyConfig("AccelerateConfiguration")},
	{subresource: "requestPayment", doc: struct {
		XMLName xml.Name `xml:"RequestPaymentConfiguration"`
		Xmlns   string   `xml:"xmlns,attr"`
		Payer   string
	}{Xmlns: s3XMLNamespace, Payer: "BucketOwner"}},
	{subresource: "acl", doc: s3AccessControlPolicy{Xmlns: s3XMLNamespace, Owner: s3TheOwner, Grants: []s3Grant{{
		Grantee:    s3Grantee{XSI: "http://www.w3.org/2001/XMLSchema-instance", Type: "CanonicalUser", s3Owner: s3TheOwner},
		Permission: "FULL_CONTROL",
	}}}},
	{subresource: "lifecycle", err: &s3Error{http.StatusNotFound, "NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist."}},
	{subresource: "policy", err: &s3Error{http.StatusNotFound, "NoSuchBucketPolicy", "The bucket policy does not exist."}},
	{subresource: "cors", err: &s3Error{http.StatusNotFound, "NoSuchCORSConfiguration", "The CORS configuration does not exist."}},
	{subresource: "tagging", err: &s3Error{http.StatusNotFound, "NoSuchTagSet", "The TagSet does not exist."}},
	{subresource: "object-lock", err: &s3Error{http.StatusNotFound, "ObjectLockConfigurationNotFoundError", "Object Lock configuration does not exist for this bucket."}},
	{subresource: "encryption", err: &s3Error{http.StatusNotFound, "ServerSideEncryptionConfigurationNotFoundError", "The server side encryption configuration was not found."}},
	{subresource: "website", err: &s3Error{http.StatusNotFound, "NoSuchWebsiteConfiguration", "The specified bucket does not have a website configuration."}},
	{subresource: "replication", err: &s3Error{http.StatusNotFound, "ReplicationConfigurationNotFoundError", "The replication configuration was not found."}},
	{subresource: "ownershipControls", err: &s3Error{http.StatusNotFound, "OwnershipControlsNotFoundError", "The bucket ownership controls were not found."}},
	{subresource: "publicAccessBlock", err: &s3Error{http.StatusNotFound, "NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found."}},
}

// handleUnsetBucketConfig answers GET /{bucket}?<subresource> for a configuration svc does not
// keep, as S3 answers it for a bucket where it was never set.
func (s *s3Server) handleUnsetBucketConfig(w http.ResponseWriter, bucket string, u s3UnsetBucketConfig) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	if u.err != nil {
		return u.err
	}
	s3WriteXML(w, http.StatusOK, u.doc)
	return nil
}

// s3IsObjectSidecar reports whether a file name in a bucket directory is an object's sidecar.
func s3IsObjectSidecar(name string) bool {
	return (strings.HasPrefix(name, "k") || strings.HasPrefix(name, "h")) && strings.HasSuffix(name, ".json")
}

// handleDeleteBucket answers DeleteBucket (DELETE /{bucket}): only an empty bucket goes.
func (s *s3Server) handleDeleteBucket(w http.ResponseWriter, bucket string) error {
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	entries, err := os.ReadDir(s.bucketDir(bucket))
	if errors.Is(err, fs.ErrNotExist) {
		return s3ErrNoSuchBucket
	}
	if err != nil {
		return fmt.Errorf("delete bucket %q: %w", bucket, err)
	}
	for _, e := range entries {
		if s3IsObjectSidecar(e.Name()) {
			return &s3Error{http.StatusConflict, "BucketNotEmpty", "The bucket you tried to delete is not empty."}
		}
	}
	if err := s.discardDir(s.root, bucket); err != nil {
		return fmt.Errorf("delete bucket: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// s3ListResult is the ListObjects (V1) and ListObjectsV2 response; nil pointers mark the
// elements of the other version.
type s3ListResult struct {
	XMLName               xml.Name `xml:"ListBucketResult"`
	Xmlns                 string   `xml:"xmlns,attr"`
	Name                  string
	Prefix                string
	Delimiter             string `xml:",omitempty"`
	EncodingType          string `xml:",omitempty"`
	MaxKeys               int
	IsTruncated           bool
	Marker                *string
	NextMarker            string `xml:",omitempty"`
	KeyCount              *int
	ContinuationToken     string `xml:",omitempty"`
	NextContinuationToken string `xml:",omitempty"`
	StartAfter            string `xml:",omitempty"`
	Contents              []s3ListEntry
	CommonPrefixes        []s3CommonPrefix
}

// s3ListEntry is one object of a list response.
type s3ListEntry struct {
	Key          string
	LastModified string
	ETag         string
	Size         int64
	StorageClass string
}

// s3CommonPrefix is one rolled-up prefix of a list response.
type s3CommonPrefix struct {
	Prefix string
}

// handleListObjects answers ListObjectsV2 (GET /{bucket}?list-type=2) and ListObjects (V1).
func (s *s3Server) handleListObjects(w http.ResponseWriter, r *http.Request, bucket string) error {
	q := r.URL.Query()
	v2 := q.Get("list-type") == "2"
	prefix, delimiter := q.Get("prefix"), q.Get("delimiter")
	maxKeys, err := s3ListLimit(q, "max-keys")
	if err != nil {
		return err
	}
	encode, err := s3ListEncoder(q)
	if err != nil {
		return err
	}
	result := s3ListResult{Xmlns: s3XMLNamespace, Name: bucket, Prefix: encode(prefix), Delimiter: encode(delimiter), EncodingType: q.Get("encoding-type"), MaxKeys: maxKeys}
	after := q.Get("marker")
	if v2 {
		after = q.Get("start-after")
		result.StartAfter = encode(after)
		if token := q.Get("continuation-token"); q.Has("continuation-token") {
			decoded, err := base64.RawURLEncoding.DecodeString(token)
			if err != nil || len(decoded) == 0 {
				return s3BadRequest("InvalidArgument", "The continuation token provided is incorrect.")
			}
			after, result.ContinuationToken = string(decoded), token
		}
	} else {
		marker := encode(after)
		result.Marker = &marker
	}
	keys, err := s.listKeys(bucket, prefix)
	if err != nil {
		return err
	}
	objects, prefixes, next := s3ListPage(keys, prefix, delimiter, after, maxKeys)
	dir := s.bucketDir(bucket)
	for _, key := range objects {
		meta, err := s3ReadMeta(filepath.Join(dir, s3ObjectName(key)))
		if err != nil {
			continue // deleted since the directory was read
		}
		result.Contents = append(result.Contents, s3ListEntry{Key: encode(key), LastModified: s3XMLTime(meta.Modified), ETag: meta.ETag, Size: meta.Size, StorageClass: "STANDARD"})
	}
	for _, p := range prefixes {
		result.CommonPrefixes = append(result.CommonPrefixes, s3CommonPrefix{Prefix: encode(p)})
	}
	result.IsTruncated = next != ""
	if v2 {
		count := len(result.Contents) + len(result.CommonPrefixes)
		result.KeyCount = &count
		if next != "" {
			result.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(next))
		}
	} else {
		result.NextMarker = encode(next)
	}
	s3WriteXML(w, http.StatusOK, result)
	return nil
}

// s3ListLimit returns the list query parameter name (max-keys, max-parts, max-uploads): a
// non-negative integer capped at s3MaxListKeys, which is also its default.
func s3ListLimit(q url.Values, name string) (int, error) {
	v := q.Get(name)
	if v == "" {
		return s3MaxListKeys, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, s3BadRequest("InvalidArgument", name+" must be a non-negative integer.")
	}
	return min(n, s3MaxListKeys), nil
}

// s3ListEncoder returns how a list response writes keys and prefixes: as they are, or
// URI-encoded when the request asks encoding-type=url.
func s3ListEncoder(q url.Values) (func(string) string, error) {
	switch q.Get("encoding-type") {
	case "":
		return func(s string) string { return s }, nil
	case "url":
		return func(s string) string { return s3URIEncode(s, true) }, nil
	}
	return nil, s3BadRequest("InvalidArgument", "Invalid Encoding Method specified in Request.")
}

// s3RollUp returns the item a key (starting with prefix) is listed as: the key itself, or,
// when delimiter occurs after the prefix, the common prefix up to and including it (rolled).
func s3RollUp(key, prefix, delimiter string) (item string, rolled bool) {
	if delimiter != "" {
		if i := strings.Index(key[len(prefix):], delimiter); i >= 0 {
			return key[:len(prefix)+i+len(delimiter)], true
		}
	}
	return key, false
}

// listKeys returns the bucket's keys that start with prefix, sorted.
func (s *s3Server) listKeys(bucket, prefix string) ([]string, error) {
	dir := s.bucketDir(bucket)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s3ErrNoSuchBucket
	}
	if err != nil {
		return nil, fmt.Errorf("list bucket %q: %w", bucket, err)
	}
	var keys []string
	for _, e := range entries {
		name := e.Name()
		if !s3IsObjectSidecar(name) {
			continue
		}
		var key string
		if name[0] == 'k' {
			raw, err := hex.DecodeString(strings.TrimSuffix(name[1:], ".json"))
			if err != nil {
				continue
			}
			key = string(raw)
		} else {
			meta, err := s3ReadMeta(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			key = meta.Key
		}
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// s3ListPage pages sorted keys (all starting with prefix) as ListObjects does: keys containing
// delimiter after the prefix roll up into a common prefix; items (keys and common prefixes,
// in order) up to and including after are skipped; at most maxKeys items are returned. next
// is the last item returned when more follow, else "": listing again after it resumes exactly
// where this page ended, even inside a rolled-up prefix.
func s3ListPage(keys []string, prefix, delimiter, after string, maxKeys int) (objects, prefixes []string, next string) {
	last := ""
	for _, key := range keys {
		item, rolled := s3RollUp(key, prefix, delimiter)
		if item <= after || item == last {
			continue
		}
		if len(objects)+len(prefixes) == maxKeys {
			return objects, prefixes, last
		}
		last = item
		if rolled {
			prefixes = append(prefixes, item)
		} else {
			objects = append(objects, key)
		}
	}
	return objects, prefixes, ""
}

// s3ParseRange interprets a Range header for an object of size bytes. S3 honours one range
// of the forms bytes=a-b, bytes=a- and bytes=-n and ignores a header it cannot parse (ok is
// false: the whole object is sent); an unsatisfiable range is InvalidRange.
func s3ParseRange(header string, size int64) (start, length int64, ok bool, err error) {
	spec, found := strings.CutPrefix(header, "bytes=")
	first, last, dash := strings.Cut(spec, "-")
	if !found || !dash || strings.Contains(spec, ",") {
		return 0, size, false, nil
	}
	invalid := &s3Error{http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable."}
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return 0, size, false, nil
		}
		if n == 0 || size == 0 {
			return 0, 0, false, invalid
		}
		n = min(n, size)
		return size - n, n, true, nil
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, size, false, nil
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, size, false, nil
		}
	}
	if a >= size {
		return 0, 0, false, invalid
	}
	b = min(b, size-1)
	return a, b - a + 1, true, nil
}

// handleGetObject answers GetObject and HeadObject, with a Range if asked.
func (s *s3Server) handleGetObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	meta, f, err := s.openObject(bucket, key)
	if err != nil {
		return err
	}
	defer f.Close()
	notModified, err := s3ReadPrecondition(r.Header, meta)
	if err != nil {
		return err
	}
	if notModified {
		w.Header().Set("ETag", meta.ETag)
		w.Header().Set("Last-Modified", meta.Modified.UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	start, length, partial, err := s3ParseRange(r.Header.Get("Range"), meta.Size)
	if err != nil {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", meta.Size))
		return err
	}
	h := w.Header()
	meta.setObjectHeaders(h)
	// A GetObject may override response headers (presigned downloads use this).
	q := r.URL.Query()
	for _, header := range []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Content-Type", "Expires"} {
		if v := q.Get("response-" + strings.ToLower(header)); v != "" {
			h.Set(header, v)
		}
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	status := http.StatusOK
	if partial {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, meta.Size))
		status = http.StatusPartialContent
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, io.NewSectionReader(f, start, length)); err != nil {
		s.logger.Debug("s3 get object: response cut short", "bucket", bucket, "key", key, "err", err)
	}
	return nil
}

// handlePutObject answers PutObject (PUT /{bucket}/{key}).
func (s *s3Server) handlePutObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	meta := &s3Meta{Key: key}
	if err := s3MetaFromHeaders(r.Header, meta); err != nil {
		return err
	}
	check, err := s3WritePrecondition(r.Header)
	if err != nil {
		return err
	}
	path, size, sum, err := s.receive(r)
	if err != nil {
		return err
	}
	meta.Size, meta.ETag, meta.Modified = size, s3ETag(sum), s.now().UTC()
	if err := s.commitObject(bucket, meta, path, check); err != nil {
		return err
	}
	w.Header().Set("ETag", meta.ETag)
	w.WriteHeader(http.StatusOK)
	return nil
}

// commitObject commits an object's sidecar and spooled data into its bucket, if check (nil
// for none) passes on the object it replaces.
func (s *s3Server) commitObject(bucket string, meta *s3Meta, path string, check func(old *s3Meta) error) error {
	err := s.commit(s.bucketDir(bucket), s3ObjectName(meta.Key), meta, path, check)
	if errors.Is(err, fs.ErrNotExist) {
		return s3ErrNoSuchBucket
	}
	return err
}

// s3CopyResult is the CopyObject response.
type s3CopyResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	Xmlns        string   `xml:"xmlns,attr"`
	LastModified string
	ETag         string
}

// handleCopyObject answers CopyObject (PUT /{bucket}/{key} with x-amz-copy-source).
func (s *s3Server) handleCopyObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	source, _, _ := strings.Cut(r.Header.Get("X-Amz-Copy-Source"), "?")
	source, err := url.PathUnescape(source)
	srcBucket, srcKey, _ := strings.Cut(strings.TrimPrefix(source, "/"), "/")
	if err != nil || srcKey == "" {
		return s3BadRequest("InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey.")
	}
	if err := s3CheckBucketName(srcBucket); err != nil {
		return err
	}
	if err := s3CheckKey(srcKey); err != nil {
		return err
	}
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	src, f, err := s.openObject(srcBucket, srcKey)
	if err != nil {
		return err
	}
	defer f.Close()
	meta := &s3Meta{Key: key, ContentType: src.ContentType, Headers: src.Headers, Metadata: src.Metadata}
	switch r.Header.Get("X-Amz-Metadata-Directive") {
	case "", "COPY":
		if srcBucket == bucket && srcKey == key {
			return s3BadRequest("InvalidRequest", "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata.")
		}
	case "REPLACE":
		if err := s3MetaFromHeaders(r.Header, meta); err != nil {
			return err
		}
	default:
		return s3BadRequest("InvalidArgument", "Unknown metadata directive.")
	}
	path, size, sum, err := s.spool(f, s3MaxMultipartSize)
	if err != nil {
		return err
	}
	meta.Size, meta.ETag, meta.Modified = size, s3ETag(sum), s.now().UTC()
	if err := s.commitObject(bucket, meta, path, nil); err != nil {
		return err
	}
	s3WriteXML(w, http.StatusOK, s3CopyResult{Xmlns: s3XMLNamespace, LastModified: s3XMLTime(meta.Modified), ETag: meta.ETag})
	return nil
}

// handleDeleteObject answers DeleteObject: 204 whether or not the key existed.
func (s *s3Server) handleDeleteObject(w http.ResponseWriter, bucket, key string) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	if err := s.remove(s.bucketDir(bucket), s3ObjectName(key)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// s3DeleteRequest is the DeleteObjects request body.
type s3DeleteRequest struct {
	Quiet   bool
	Objects []struct {
		Key string
	} `xml:"Object"`
}

// s3DeleteResult is the DeleteObjects response.
type s3DeleteResult struct {
	XMLName xml.Name        `xml:"DeleteResult"`
	Xmlns   string          `xml:"xmlns,attr"`
	Deleted []s3DeletedKey  `xml:"Deleted"`
	Errors  []s3DeleteError `xml:"Error"`
}

// s3DeletedKey is one key DeleteObjects removed.
type s3DeletedKey struct {
	Key string
}

// s3DeleteError is one key DeleteObjects could not remove.
type s3DeleteError struct {
	Key     string
	Code    string
	Message string
}

// handleDeleteObjects answers DeleteObjects (POST /{bucket}?delete).
func (s *s3Server) handleDeleteObjects(w http.ResponseWriter, r *http.Request, bucket string) error {
	var req s3DeleteRequest
	found, err := s3ReadXML(r, &req)
	if err != nil {
		return err
	}
	if !found || len(req.Objects) == 0 || len(req.Objects) > s3MaxDeleteObjects {
		return s3ErrMalformedXML
	}
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	result := s3DeleteResult{Xmlns: s3XMLNamespace}
	for _, o := range req.Objects {
		err := s3CheckKey(o.Key)
		if err == nil && o.Key == "" {
			err = s3BadRequest("InvalidArgument", "An object key must not be empty.")
		}
		if err == nil {
			err = s.remove(s.bucketDir(bucket), s3ObjectName(o.Key))
		}
		var se *s3Error
		switch {
		case err == nil:
			if !req.Quiet {
				result.Deleted = append(result.Deleted, s3DeletedKey{Key: o.Key})
			}
		case errors.As(err, &se):
			result.Errors = append(result.Errors, s3DeleteError{Key: o.Key, Code: se.code, Message: se.message})
		default:
			s.logger.Error("s3 delete objects", "bucket", bucket, "key", o.Key, "err", err)
			result.Errors = append(result.Errors, s3DeleteError{Key: o.Key, Code: s3ErrInternal.code, Message: s3ErrInternal.message})
		}
	}
	s3WriteXML(w, http.StatusOK, result)
	return nil
}
