package main

// s3_multipart.go: the multipart uploads of the S3 endpoint (s3.go): create, upload parts,
// list parts, complete, abort, list the uploads of a bucket, and the janitor that removes
// uploads abandoned for s3StaleAge (and temporary files as old) while the server runs.

import (
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
	id := randomID("", 16)
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

// loadUpload returns the record and directory of the upload named by the request's uploadId,
// which must belong to bucket and key.
func (s *s3Server) loadUpload(r *http.Request, bucket, key string) (*s3Meta, string, error) {
	id := r.URL.Query().Get("uploadId")
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
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
	err = s.commit(dir, s3PartName(part), meta, path)
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
	marker, maxParts := 0, s3MaxListKeys
	if v := q.Get("part-number-marker"); v != "" {
		if marker, err = strconv.Atoi(v); err != nil || marker < 0 {
			return s3BadRequest("InvalidArgument", "part-number-marker must be a non-negative integer.")
		}
	}
	if v := q.Get("max-parts"); v != "" {
		if maxParts, err = strconv.Atoi(v); err != nil || maxParts < 0 {
			return s3BadRequest("InvalidArgument", "max-parts must be a non-negative integer.")
		}
		maxParts = min(maxParts, s3MaxListKeys)
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
	if err := s.commitObject(bucket, meta, path); err != nil {
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
