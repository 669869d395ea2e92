package main

import (
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// s3TestBotocorePresign is a Python program that prints the SigV2 presigned
// URL botocore makes for an operation (argv: endpoint, access key, secret,
// operation, key).
const s3TestBotocorePresign = `import sys, botocore.session, botocore.config
endpoint, access, secret, op, key = sys.argv[1:]
c = botocore.session.get_session().create_client("s3", endpoint_url=endpoint, region_name="us-east-1",
    aws_access_key_id=access, aws_secret_access_key=secret,
    config=botocore.config.Config(signature_version="s3", s3={"addressing_style": "path"}))
print(c.generate_presigned_url(op, Params={"Bucket": "bucket", "Key": key}, ExpiresIn=300))`

// TestS3PresignedV2Clients fetches the SigV2 presigned URLs of s3cmd signurl and aws s3
// presign (AWS CLI v1's default), and a HEAD URL presigned by botocore, with net/http and
// curl: valid ones answer, expired, tampered and other-method ones are refused.
func TestS3PresignedV2Clients(t *testing.T) {
	e := newS3TestEnv(t)
	var clock atomic.Int64 // the server's clock, in Unix seconds
	clock.Store(time.Now().Unix())
	e.server.now = func() time.Time { return time.Unix(clock.Load(), 0) }
	s3cmd, aws := s3TestS3cmd(t, e), s3TestAWSCLI(t, e)
	const key, content = "shared/report 1.txt", "presigned content"
	e.put(t, key, []byte(content))
	e.put(t, "shared/other.txt", []byte("not yours"))
	fetch := func(method, target string) s3TestResponse {
		t.Helper()
		req, err := http.NewRequest(method, strings.TrimSpace(target), nil)
		if err != nil {
			t.Fatal(err)
		}
		return e.send(t, req)
	}
	urls := map[string]string{
		"s3cmd signurl":  strings.TrimSpace(s3cmd("signurl", "s3://bucket/"+key, "+300")),
		"aws s3 presign": strings.TrimSpace(aws("default", "s3", "presign", "s3://bucket/"+key, "--expires-in", "300")),
	}
	for name, u := range urls {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(u, "AWSAccessKeyId=") || !strings.Contains(u, "Signature=") {
				t.Fatalf("%s made no SigV2 URL: %s", name, u)
			}
			if resp := fetch("GET", u); resp.status != http.StatusOK || string(resp.body) != content {
				t.Errorf("GET: %d %s", resp.status, resp.body)
			}
			if curl, err := exec.LookPath("curl"); err == nil {
				out, err := exec.Command(curl, "-sS", "--fail", "--max-time", "30", u).CombinedOutput()
				if err != nil || string(out) != content {
					t.Errorf("curl: %v: %s", err, out)
				}
			}
			fetch("HEAD", u).wantStatus(t, "HEAD with a URL presigned for GET", http.StatusForbidden)
			fetch("GET", strings.Replace(u, "report%201.txt", "other.txt", 1)).wantError(t, "another key", http.StatusForbidden, "SignatureDoesNotMatch")
			fetch("GET", u+"&response-content-type=text%2Fhtml").wantError(t, "an added response override", http.StatusForbidden, "SignatureDoesNotMatch")
			fetch("GET", strings.Replace(u, "Signature=", "Signature=A", 1)).wantError(t, "a changed signature", http.StatusForbidden, "SignatureDoesNotMatch")
			fetch("GET", strings.Replace(u, "AWSAccessKeyId=", "AWSAccessKeyId=X", 1)).wantError(t, "another access key", http.StatusForbidden, "InvalidAccessKeyId")

			now := clock.Load()
			clock.Store(now + 400) // past the 300 s the URLs were signed for (s3cmd adds a little)
			fetch("GET", u).wantError(t, "after Expires", http.StatusForbidden, "AccessDenied")
			clock.Store(now)
		})
	}
	tooLong := s3cmd("signurl", "s3://bucket/"+key, "+"+strconv.Itoa(8*24*3600))
	fetch("GET", tooLong).wantError(t, "Expires eight days ahead", http.StatusBadRequest, "AuthorizationQueryParametersError")

	t.Run("HEAD presigned by botocore", func(t *testing.T) {
		if err := exec.Command("python3", "-c", "import botocore").Run(); err != nil {
			t.Skipf("python3 with botocore is not available (pip install awscli installs it): %v", err)
		}
		head := s3TestTool(t, nil, "python3", "-c", s3TestBotocorePresign, e.http.URL, s3TestAccessKey, s3TestSecretKey, "head_object", key)
		resp := fetch("HEAD", head)
		if resp.status != http.StatusOK || resp.header.Get("Content-Length") != strconv.Itoa(len(content)) {
			t.Errorf("HEAD: %d, Content-Length %q; want 200, %d", resp.status, resp.header.Get("Content-Length"), len(content))
		}
		fetch("GET", head).wantError(t, "GET with a URL presigned for HEAD", http.StatusForbidden, "SignatureDoesNotMatch")
		now := clock.Load()
		clock.Store(now + 400) // past the 300 s the URLs were signed for (s3cmd adds a little)
		fetch("HEAD", head).wantStatus(t, "HEAD after Expires", http.StatusForbidden)
		clock.Store(now)
	})
}
