package main

// s3_conditional.go: the conditional requests of the built-in S3 endpoint (s3.go), as Amazon S3
// evaluates them: If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since on
// GetObject and HeadObject; If-Match and If-None-Match: * on PutObject and
// CompleteMultipartUpload (conditional writes).

import (
	"net/http"
	"strings"
	"time"
)

// s3ErrPreconditionFailed answers a request whose If-Match or If-Unmodified-Since (or, on a
// write, If-None-Match: *) does not hold.
var s3ErrPreconditionFailed = &s3Error{http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold."}

// s3ETagListMatches reports whether an If-Match or If-None-Match value, "*" or a
// comma-separated list of entity tags (quoted, weak or not), names etag.
func s3ETagListMatches(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || strings.Trim(t, `"`) == strings.Trim(etag, `"`) {
			return true
		}
	}
	return false
}

// s3ReadPrecondition evaluates the conditional headers of a GetObject or HeadObject against
// the object m, in S3's (and RFC 9110's) order: If-Match, else If-Unmodified-Since, may fail
// the request with PreconditionFailed; then If-None-Match, else If-Modified-Since, may answer
// 304 Not Modified (notModified). Dates compare to the second, as Last-Modified carries them.
func s3ReadPrecondition(h http.Header, m *s3Meta) (notModified bool, err error) {
	modified := m.Modified.Truncate(time.Second)
	if v := h.Get("If-Match"); v != "" {
		if !s3ETagListMatches(v, m.ETag) {
			return false, s3ErrPreconditionFailed
		}
	} else if t, err := http.ParseTime(h.Get("If-Unmodified-Since")); err == nil && modified.After(t) {
		return false, s3ErrPreconditionFailed
	}
	if v := h.Get("If-None-Match"); v != "" {
		return s3ETagListMatches(v, m.ETag), nil
	}
	if t, err := http.ParseTime(h.Get("If-Modified-Since")); err == nil && !modified.After(t) {
		return true, nil
	}
	return false, nil
}

// s3WritePrecondition returns the check of a conditional write against the object it would
// replace (nil when the request sets no condition): If-Match needs the object to exist
// (NoSuchKey) with that ETag (PreconditionFailed); If-None-Match: * needs it not to exist.
// S3 accepts no other If-None-Match on a write.
func s3WritePrecondition(h http.Header) (func(old *s3Meta) error, error) {
	match, noneMatch := h.Get("If-Match"), h.Get("If-None-Match")
	if match == "" && noneMatch == "" {
		return nil, nil
	}
	if noneMatch != "" && strings.TrimSpace(noneMatch) != "*" {
		return nil, &s3Error{http.StatusNotImplemented, "NotImplemented", "A header you provided implies functionality that is not implemented: If-None-Match on a write takes only *."}
	}
	return func(old *s3Meta) error {
		switch {
		case match != "" && old == nil:
			return s3ErrNoSuchKey
		case match != "" && !s3ETagListMatches(match, old.ETag):
			return s3ErrPreconditionFailed
		case noneMatch != "" && old != nil:
			return s3ErrPreconditionFailed
		}
		return nil
	}, nil
}
