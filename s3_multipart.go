package main

// s3_multipart.go: the multipart uploads of the S3 endpoint (s3.go): create, upload parts,
// list parts, complete, abort, list the uploads of a bucket, and the janitor that removes
// uploads abandoned for s3StaleAge (and temporary files as old) while the server runs.

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// handleCreateMultipartUpload answers CreateMultipartUpload (POST /{bucket}/{key}?uploads).
func (s *s3Server) handleCreateMultipartUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	upload := &s3Meta{Key: key, Bucket: bucket, Modified: s.now().UTC()}
	if err := s3MetaFromHeaders(r.Header, upload); err != nil {
		return err
	}
	record, err := json.Marshal(upload)
	if err != nil {
		return fmt.Errorf("create multipart upload: %w", err)
	}
	id := s3NewUploadID(upload.Modified)
	if err := s.createDir(s.uploadsDir(), id, s3UploadFile, record); err != nil {
		return err
	}
	s3WriteXML(w, http.StatusOK, struct {
		XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
		Xmlns    string   `xml:"xmlns,attr"`
		Bucket   string
		Key      string
		UploadID string `xml:"UploadId"`
	}{Xmlns: s3XMLNamespace, Bucket: bucket, Key: key, UploadID: id})
	return nil
}

// s3NewUploadID returns a new upload id: 32 hex digits, the first 16 the creation time in
// nanoseconds, so that sorting ids sorts the uploads of one key by creation, as S3 lists them.
func s3NewUploadID(created time.Time) string {
	return fmt.Sprintf("%016x", uint64(created.UnixNano())) + randomID("", 8)
}

// s3IsUploadID reports whether id has the form of an upload id (and so names no other file).
func s3IsUploadID(id string) bool {
	return len(id) == 32 && strings.Trim(id, "0123456789abcdef") == ""
}

// loadUpload returns the record and directory of the upload named by the request's uploadId,
// which must belong to bucket and key.
func (s *s3Server) loadUpload(r *http.Request, bucket, key string) (*s3Meta, string, error) {
	id := r.URL.Query().Get("uploadId")
	if !s3IsUploadID(id) {
		return nil, "", s3ErrNoSuchUpload
	}
	dir := filepath.Join(s.uploadsDir(), id)
	upload, err := s3ReadMeta(filepath.Join(dir, s3UploadFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", s3ErrNoSuchUpload
	}
	if err != nil {
		return nil, "", err
	}
	if upload.Bucket != bucket || upload.Key != key {
		return nil, "", s3ErrNoSuchUpload
	}
	return upload, dir, nil
}

// handleUploadPart answers UploadPart (PUT /{bucket}/{key}?partNumber=&uploadId=).
func (s *s3Server) handleUploadPart(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	part, err := strconv.Atoi(r.URL.Query().Get("partNumber"))
	if err != nil || part < 1 || part > s3MaxPartNumber {
		return s3BadRequest("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive.")
	}
	_, dir, err := s.loadUpload(r, bucket, key)
	if err != nil {
		return err
	}
	path, size, sum, err := s.receive(r)
	if err != nil {
		return err
	}
	meta := &s3Meta{Part: part, Size: size, ETag: s3ETag(sum), Modified: s.now().UTC()}
	err = s.commit(dir, s3PartName(part), meta, path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return s3ErrNoSuchUpload
	}
	if err != nil {
		return err
	}
	w.Header().Set("ETag", meta.ETag)
	w.WriteHeader(http.StatusOK)
	return nil
}

// s3ReadParts returns the committed parts of an upload, by part number.
func s3ReadParts(dir string) ([]*s3Meta, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s3ErrNoSuchUpload
	}
	if err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	var parts []*s3Meta
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "p") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		meta, err := s3ReadMeta(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, meta)
	}
	slices.SortFunc(parts, func(a, b *s3Meta) int { return a.Part - b.Part })
	return parts, nil
}

// s3ListPartsResult is the ListParts response.
type s3ListPartsResult struct {
	XMLName              xml.Name `xml:"ListPartsResult"`
	Xmlns                string   `xml:"xmlns,attr"`
	Bucket               string
	Key                  string
	UploadID             string `xml:"UploadId"`
	PartNumberMarker     int
	NextPartNumberMarker int
	MaxParts             int
	IsTruncated          bool
	StorageClass         string
	Parts                []s3PartEntry `xml:"Part"`
}

// s3PartEntry is one part of a ListParts response.
type s3PartEntry struct {
	PartNumber   int
	LastModified string
	ETag         string
	Size         int64
}

// handleListParts answers ListParts (GET /{bucket}/{key}?uploadId=).
func (s *s3Server) handleListParts(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	_, dir, err := s.loadUpload(r, bucket, key)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	marker := 0
	if v := q.Get("part-number-marker"); v != "" {
		if marker, err = strconv.Atoi(v); err != nil || marker < 0 {
			return s3BadRequest("InvalidArgument", "part-number-marker must be a non-negative integer.")
		}
	}
	maxParts, err := s3ListLimit(q, "max-parts")
	if err != nil {
		return err
	}
	parts, err := s3ReadParts(dir)
	if err != nil {
		return err
	}
	result := s3ListPartsResult{Xmlns: s3XMLNamespace, Bucket: bucket, Key: key, UploadID: q.Get("uploadId"), PartNumberMarker: marker, MaxParts: maxParts, StorageClass: "STANDARD"}
	for _, p := range parts {
		if p.Part <= marker {
			continue
		}
		if len(result.Parts) == maxParts {
			result.IsTruncated = true
			break
		}
		result.Parts = append(result.Parts, s3PartEntry{PartNumber: p.Part, LastModified: s3XMLTime(p.Modified), ETag: p.ETag, Size: p.Size})
		result.NextPartNumberMarker = p.Part
	}
	s3WriteXML(w, http.StatusOK, result)
	return nil
}

// s3CompleteRequest is the CompleteMultipartUpload request body.
type s3CompleteRequest struct {
	Parts []struct {
		PartNumber int
		ETag       string
	} `xml:"Part"`
}

// s3PartsReader reads the data files of parts one after the other, opening each only when
// it is reached.
type s3PartsReader struct {
	paths []string
	cur   *os.File
}

// Read reads the next bytes of the concatenated parts.
func (p *s3PartsReader) Read(b []byte) (int, error) {
	for {
		if p.cur == nil {
			if len(p.paths) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(p.paths[0])
			if err != nil {
				return 0, fmt.Errorf("read part: %w", err)
			}
			p.cur, p.paths = f, p.paths[1:]
		}
		n, err := p.cur.Read(b)
		if err == io.EOF {
			p.cur.Close()
			p.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

// Close closes the part being read, if any.
func (p *s3PartsReader) Close() error {
	if p.cur != nil {
		return p.cur.Close()
	}
	return nil
}

// handleCompleteMultipartUpload answers CompleteMultipartUpload (POST /{bucket}/{key}?uploadId=):
// the listed parts, ascending and matching their ETags, all but the last at least 5 MiB, are
// joined into the object, whose ETag is the MD5 of the parts' MD5s followed by "-<count>".
func (s *s3Server) handleCompleteMultipartUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	upload, dir, err := s.loadUpload(r, bucket, key)
	if err != nil {
		return err
	}
	check, err := s3WritePrecondition(r.Header)
	if err != nil {
		return err
	}
	var req s3CompleteRequest
	if found, err := s3ReadXML(r, &req); err != nil {
		return err
	} else if !found || len(req.Parts) == 0 {
		return s3BadRequest("MalformedXML", "You must specify at least one part.")
	}
	parts, err := s3ReadParts(dir)
	if err != nil {
		return err
	}
	byNumber := map[int]*s3Meta{}
	for _, p := range parts {
		byNumber[p.Part] = p
	}
	invalidPart := s3BadRequest("InvalidPart", "One or more of the specified parts could not be found. The part might not have been uploaded, or the specified ETag might not have matched the part's ETag.")
	etags := md5.New()
	paths := make([]string, 0, len(req.Parts))
	for i := 1; i < len(req.Parts); i++ {
		if req.Parts[i].PartNumber <= req.Parts[i-1].PartNumber {
			return s3BadRequest("InvalidPartOrder", "The list of parts was not in ascending order. The parts list must be specified in order by part number.")
		}
	}
	for i, want := range req.Parts {
		p, ok := byNumber[want.PartNumber]
		if !ok || !strings.EqualFold(strings.Trim(want.ETag, `" `), strings.Trim(p.ETag, `"`)) {
			return invalidPart
		}
		if i < len(req.Parts)-1 && p.Size < s3MinPartSize {
			return s3BadRequest("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.")
		}
		sum, err := hex.DecodeString(strings.Trim(p.ETag, `"`))
		if err != nil {
			return invalidPart
		}
		etags.Write(sum)
		paths = append(paths, filepath.Join(dir, p.Data))
	}
	joined := &s3PartsReader{paths: paths}
	defer joined.Close()
	path, size, _, err := s.spool(joined, s3MaxMultipartSize)
	if err != nil {
		return err
	}
	meta := &s3Meta{Key: key, Size: size, ETag: fmt.Sprintf(`"%x-%d"`, etags.Sum(nil), len(req.Parts)), Modified: s.now().UTC(),
		ContentType: upload.ContentType, Headers: upload.Headers, Metadata: upload.Metadata}
	if err := s.commitObject(bucket, meta, path, check); err != nil {
		return err
	}
	if err := s.discardDir(s.uploadsDir(), filepath.Base(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.logger.Warn("s3 complete multipart upload: discard parts", "dir", dir, "err", err)
	}
	s3WriteXML(w, http.StatusOK, struct {
		XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
		Xmlns    string   `xml:"xmlns,attr"`
		Location string
		Bucket   string
		Key      string
		ETag     string
	}{Xmlns: s3XMLNamespace, Location: "/" + bucket + "/" + s3URIEncode(key, true), Bucket: bucket, Key: key, ETag: meta.ETag})
	return nil
}

// handleAbortMultipartUpload answers AbortMultipartUpload (DELETE /{bucket}/{key}?uploadId=).
func (s *s3Server) handleAbortMultipartUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	_, dir, err := s.loadUpload(r, bucket, key)
	if err != nil {
		return err
	}
	if err := s.discardDir(s.uploadsDir(), filepath.Base(dir)); errors.Is(err, fs.ErrNotExist) {
		return s3ErrNoSuchUpload
	} else if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// s3Upload is one in-progress multipart upload of a bucket, as ListMultipartUploads lists it.
type s3Upload struct {
	key, id   string
	initiated time.Time
}

// listUploads returns the bucket's in-progress uploads of keys starting with prefix, sorted by
// key then id (for the ids svc makes, by creation). An unreadable upload record is logged and
// left out; the janitor removes it in time.
func (s *s3Server) listUploads(bucket, prefix string) ([]s3Upload, error) {
	entries, err := os.ReadDir(s.uploadsDir())
	if err != nil {
		return nil, fmt.Errorf("list multipart uploads: %w", err)
	}
	var uploads []s3Upload
	for _, e := range entries {
		if !e.IsDir() || !s3IsUploadID(e.Name()) {
			continue
		}
		record, err := s3ReadMeta(filepath.Join(s.uploadsDir(), e.Name(), s3UploadFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue // completed or aborted since the directory was read
		}
		if err != nil {
			s.logger.Warn("s3 list multipart uploads: unreadable upload", "id", e.Name(), "err", err)
			continue
		}
		if record.Bucket == bucket && strings.HasPrefix(record.Key, prefix) {
			uploads = append(uploads, s3Upload{key: record.Key, id: e.Name(), initiated: record.Modified})
		}
	}
	slices.SortFunc(uploads, func(a, b s3Upload) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return uploads, nil
}

// s3UploadsPage pages uploads (sorted by key then id, all keys starting with prefix) as
// ListMultipartUploads does: keys containing delimiter after the prefix roll up into a common
// prefix; items up to the markers are skipped (with keyMarker alone, every upload of keys up to
// and including it; with idMarker too, the uploads of keyMarker up to and including that id); at
// most maxUploads items (uploads and common prefixes) are returned. When more follow, nextKey and
// nextID are the markers of the next page: the last upload returned, or the last common prefix
// and no id.
func s3UploadsPage(uploads []s3Upload, prefix, delimiter, keyMarker, idMarker string, maxUploads int) (page []s3Upload, prefixes []string, nextKey, nextID string) {
	for _, u := range uploads {
		item, rolled := s3RollUp(u.key, prefix, delimiter)
		if rolled && (item <= keyMarker || len(prefixes) > 0 && item == prefixes[len(prefixes)-1]) ||
			!rolled && (u.key < keyMarker || u.key == keyMarker && (idMarker == "" || u.id <= idMarker)) {
			continue
		}
		if len(page)+len(prefixes) == maxUploads {
			return page, prefixes, nextKey, nextID
		}
		if rolled {
			prefixes = append(prefixes, item)
			nextKey, nextID = item, ""
		} else {
			page = append(page, u)
			nextKey, nextID = u.key, u.id
		}
	}
	return page, prefixes, "", ""
}

// s3ListUploadsResult is the ListMultipartUploads response.
type s3ListUploadsResult struct {
	XMLName            xml.Name `xml:"ListMultipartUploadsResult"`
	Xmlns              string   `xml:"xmlns,attr"`
	Bucket             string
	KeyMarker          string
	UploadIDMarker     string `xml:"UploadIdMarker"`
	NextKeyMarker      string `xml:",omitempty"`
	NextUploadIDMarker string `xml:"NextUploadIdMarker,omitempty"`
	Prefix             string
	Delimiter          string `xml:",omitempty"`
	EncodingType       string `xml:",omitempty"`
	MaxUploads         int
	IsTruncated        bool
	Uploads            []s3UploadEntry `xml:"Upload"`
	CommonPrefixes     []s3CommonPrefix
}

// s3UploadEntry is one upload of a ListMultipartUploads response.
type s3UploadEntry struct {
	Key          string
	UploadID     string `xml:"UploadId"`
	Initiator    s3Owner
	Owner        s3Owner
	StorageClass string
	Initiated    string
}

// handleListMultipartUploads answers ListMultipartUploads (GET /{bucket}?uploads) with prefix,
// delimiter, key-marker, upload-id-marker, max-uploads and encoding-type.
func (s *s3Server) handleListMultipartUploads(w http.ResponseWriter, r *http.Request, bucket string) error {
	q := r.URL.Query()
	maxUploads, err := s3ListLimit(q, "max-uploads")
	if err != nil {
		return err
	}
	encode, err := s3ListEncoder(q)
	if err != nil {
		return err
	}
	if !s.bucketExists(bucket) {
		return s3ErrNoSuchBucket
	}
	prefix, delimiter, keyMarker, idMarker := q.Get("prefix"), q.Get("delimiter"), q.Get("key-marker"), q.Get("upload-id-marker")
	uploads, err := s.listUploads(bucket, prefix)
	if err != nil {
		return err
	}
	page, prefixes, nextKey, nextID := s3UploadsPage(uploads, prefix, delimiter, keyMarker, idMarker, maxUploads)
	result := s3ListUploadsResult{Xmlns: s3XMLNamespace, Bucket: bucket, KeyMarker: encode(keyMarker), UploadIDMarker: idMarker,
		NextKeyMarker: encode(nextKey), NextUploadIDMarker: nextID, Prefix: encode(prefix), Delimiter: encode(delimiter),
		EncodingType: q.Get("encoding-type"), MaxUploads: maxUploads, IsTruncated: nextKey != ""}
	for _, u := range page {
		result.Uploads = append(result.Uploads, s3UploadEntry{Key: encode(u.key), UploadID: u.id, Initiator: s3TheOwner, Owner: s3TheOwner,
			StorageClass: "STANDARD", Initiated: s3XMLTime(u.initiated)})
	}
	for _, p := range prefixes {
		result.CommonPrefixes = append(result.CommonPrefixes, s3CommonPrefix{Prefix: encode(p)})
	}
	s3WriteXML(w, http.StatusOK, result)
	return nil
}

// start starts the janitor: it sweeps at once (what a stopped server left behind) and then
// every s3JanitorInterval, until Close. Call it at most once, after setting logger.
func (s *s3Server) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopJanitor, s.janitorDone = cancel, make(chan struct{})
	go func() {
		defer close(s.janitorDone)
		tick := time.NewTicker(s3JanitorInterval)
		defer tick.Stop()
		for {
			s.sweep(ctx, time.Now())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// Close stops the janitor, if started, and waits for it to end; a sweep in progress stops at
// its next entry. Requests in flight are the HTTP server's to end. Close may be called again.
func (s *s3Server) Close() error {
	if s.stopJanitor != nil {
		s.stopJanitor()
		<-s.janitorDone
	}
	return nil
}

// sweep removes what has been abandoned for s3StaleAge at now: the multipart uploads whose
// directory has not changed (no part was uploaded) and the temporary files not written since.
// An upload swept while a late part arrives answers that part NoSuchUpload.
func (s *s3Server) sweep(ctx context.Context, now time.Time) {
	cutoff := now.Add(-s3StaleAge)
	for _, dir := range []string{s.uploadsDir(), s.tmpDir()} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			s.logger.Warn("s3 janitor: read directory", "dir", dir, "err", err)
			continue
		}
		for _, e := range entries {
			if ctx.Err() != nil {
				return
			}
			info, err := e.Info()
			if err != nil || !info.ModTime().Before(cutoff) {
				continue // removed meanwhile, or still fresh
			}
			if dir == s.uploadsDir() {
				err = s.discardDir(dir, e.Name())
			} else {
				err = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.logger.Warn("s3 janitor: remove abandoned file", "dir", dir, "name", e.Name(), "err", err)
				continue
			}
			s.logger.Debug("s3 janitor: removed abandoned file", "dir", dir, "name", e.Name(), "modified", info.ModTime())
		}
	}
}
