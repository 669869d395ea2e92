package main

// SigV2 query authentication (presigned URLs) as the built-in object storage
// verifies it, for GET and HEAD only: `aws s3 presign` (AWS CLI v1's
// default) and `s3cmd signurl` presign with Signature Version 2. Every other
// SigV2 request is refused with s3ErrSignatureV2 (s3_sigv4.go), which says
// how to switch the client to SigV4. The checks match the SigV4 presigned
// ones: the access key and the signature are compared in constant time, and
// the URL is valid until its Expires, at most s3MaxPresignExpiry ahead.

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// s3V2SignedSubresources are the query parameters a SigV2 string to sign
// covers (the canonicalized resource's subresources and response
// overrides); the others are left out of it by the clients that sign.
var s3V2SignedSubresources = []string{
	"accelerate", "acl", "analytics", "cors", "delete", "inventory", "lifecycle", "location", "logging", "metrics",
	"notification", "object-lock", "partNumber", "policy", "replication", "requestPayment", "response-cache-control",
	"response-content-disposition", "response-content-encoding", "response-content-language", "response-content-type",
	"response-expires", "restore", "select", "select-type", "storageClass", "tagging", "torrent", "uploadId", "uploads",
	"versionId", "versioning", "versions", "website",
}

// authenticatePresignedV2 verifies a SigV2 presigned URL (the query
// parameters AWSAccessKeyId, Expires and Signature) of a GET or HEAD
// request. The method is part of what is signed, so a URL presigned for GET
// does not serve a HEAD (as with SigV4).
func (s *s3Server) authenticatePresignedV2(r *http.Request, q url.Values) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return s3ErrSignatureV2
	}
	accessKey, expires, signature := q.Get("AWSAccessKeyId"), q.Get("Expires"), q.Get("Signature")
	if accessKey == "" || expires == "" || signature == "" {
		return s3BadRequest("AuthorizationQueryParametersError", "Query-string authentication requires the AWSAccessKeyId, Expires and Signature parameters.")
	}
	if subtle.ConstantTimeCompare([]byte(accessKey), []byte(s.accessKey)) != 1 {
		return &s3Error{http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."}
	}
	secs, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return s3BadRequest("AuthorizationQueryParametersError", "Expires must be a number of seconds since the epoch.")
	}
	now, until := s.now(), time.Unix(secs, 0)
	if now.After(until) {
		return &s3Error{http.StatusForbidden, "AccessDenied", "Request has expired."}
	}
	if until.After(now.Add(s3MaxPresignExpiry + s3MaxClockSkew)) {
		return s3BadRequest("AuthorizationQueryParametersError", "Expires must be at most 604800 seconds (seven days) from now.")
	}
	// A '+' of the base64 signature that the client left unescaped reads as a space.
	signature = strings.ReplaceAll(signature, " ", "+")
	for _, path := range s3RequestPaths(r) {
		if hmac.Equal([]byte(s3SignatureV2(r, s.secretKey, path, expires)), []byte(signature)) {
			return nil
		}
	}
	return s3ErrSignature
}

// s3SignatureV2 returns the base64 SigV2 signature of r with the Expires
// value expires and its path encoded as path: HMAC-SHA1 under secret of the
// method, Content-MD5, Content-Type, Expires, the x-amz-* headers and the
// canonicalized resource, one per line.
func s3SignatureV2(r *http.Request, secret, path, expires string) string {
	var b strings.Builder
	for _, line := range []string{r.Method, r.Header.Get("Content-MD5"), r.Header.Get("Content-Type"), expires} {
		b.WriteString(line + "\n")
	}
	var amz []string
	for name, values := range r.Header {
		if name = strings.ToLower(name); strings.HasPrefix(name, "x-amz-") {
			amz = append(amz, name+":"+strings.TrimSpace(strings.Join(values, ","))+"\n")
		}
	}
	slices.Sort(amz)
	b.WriteString(strings.Join(amz, "") + path)
	q := r.URL.Query()
	sep := "?"
	for _, name := range s3V2SignedSubresources { // sorted
		if !q.Has(name) {
			continue
		}
		b.WriteString(sep + name)
		if v := q.Get(name); v != "" {
			b.WriteString("=" + v)
		}
		sep = "&"
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
