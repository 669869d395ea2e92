package main

// The built-in S3 server judged by the S3 clients users run: the aws CLI,
// s3cmd and rclone, each as a process.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// s3TestNeedTool skips the test unless the command-line S3 client name is on PATH.
func s3TestNeedTool(t *testing.T, name, install string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not on PATH (%s installs it; .ci/run does)", name, install)
	}
}

// s3TestTool runs a command-line S3 client with env as its whole environment besides PATH and
// HOME, failing the test unless it succeeds within conformanceCLITimeout. It returns the
// combined output.
func s3TestTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), conformanceCLITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// getURL fetches target (a presigned URL) without signing it.
func (e *s3TestEnv) getURL(t *testing.T, target string) s3TestResponse {
	t.Helper()
	req, err := http.NewRequest("GET", strings.TrimSpace(target), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.send(t, req)
}

// wantSigV4Hint fails the test unless resp tells a SigV2 client to switch to SigV4.
func (r s3TestResponse) wantSigV4Hint(t *testing.T, what string) {
	t.Helper()
	r.wantError(t, what, http.StatusBadRequest, "InvalidRequest")
	if !strings.Contains(string(r.body), "signature_version s3v4") {
		t.Errorf("%s: error lacks the switch to SigV4: %s", what, r.body)
	}
}

// s3TestAWSCLI returns a runner of the AWS CLI against e with the given
// configuration: "default" (path-style addressing; AWS CLI v1 then presigns
// with SigV2) or "s3v4" (the same, signing with SigV4).
func s3TestAWSCLI(t *testing.T, e *s3TestEnv) func(config string, args ...string) string {
	t.Helper()
	s3TestNeedTool(t, "aws", "pip install awscli")
	dir := t.TempDir()
	configs := map[string]string{
		"default": "[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n",
		"s3v4":    "[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n  signature_version = s3v4\n",
	}
	env := map[string][]string{}
	for name, config := range configs {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		env[name] = []string{"AWS_ACCESS_KEY_ID=" + s3TestAccessKey, "AWS_SECRET_ACCESS_KEY=" + s3TestSecretKey, "AWS_CONFIG_FILE=" + path,
			"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none"), "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER="}
	}
	return func(config string, args ...string) string {
		return s3TestTool(t, env[config], "aws", append(args, "--endpoint-url", e.http.URL)...)
	}
}

// TestS3AWSCLIUploads drives the AWS CLI through list-multipart-uploads,
// get-bucket-versioning and presign with SigV4 (its SigV2 URLs: TestS3PresignedV2Clients).
func TestS3AWSCLIUploads(t *testing.T) {
	e := newS3TestEnv(t)
	aws := s3TestAWSCLI(t, e)
	e.put(t, "shared.txt", []byte("presigned content"))
	id := e.multipartUpload(t, "pending/big.bin", nil)
	if out := aws("default", "s3api", "list-multipart-uploads", "--bucket", "bucket"); !strings.Contains(out, id) || !strings.Contains(out, "pending/big.bin") {
		t.Errorf("list-multipart-uploads lacks the upload %s:\n%s", id, out)
	}
	if out := aws("default", "s3api", "list-multipart-uploads", "--bucket", "bucket", "--prefix", "other/"); strings.Contains(out, id) {
		t.Errorf("list-multipart-uploads --prefix other/ lists the upload:\n%s", out)
	}
	if out := aws("default", "s3api", "get-bucket-versioning", "--bucket", "bucket"); strings.Contains(out, "Enabled") {
		t.Errorf("get-bucket-versioning:\n%s", out)
	}
	aws("default", "s3api", "abort-multipart-upload", "--bucket", "bucket", "--key", "pending/big.bin", "--upload-id", id)
	if got := e.listUploads(t, ""); len(got.Upload) != 0 {
		t.Errorf("uploads after abort-multipart-upload: %q", got.items())
	}

	v4 := aws("s3v4", "s3", "presign", "s3://bucket/shared.txt")
	if resp := e.getURL(t, v4); resp.status != http.StatusOK || string(resp.body) != "presigned content" {
		t.Errorf("SigV4 URL of aws s3 presign: %d %s", resp.status, resp.body)
	}
}

// s3TestS3cmd returns a runner of s3cmd against e, signing with SigV4
// (signurl signs with SigV2 whatever the configuration).
func s3TestS3cmd(t *testing.T, e *s3TestEnv) func(args ...string) string {
	t.Helper()
	s3TestNeedTool(t, "s3cmd", "apt-get install s3cmd")
	host := strings.TrimPrefix(e.http.URL, "http://")
	config := filepath.Join(t.TempDir(), "s3cfg")
	content := fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n",
		s3TestAccessKey, s3TestSecretKey, host, host)
	if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) string {
		return s3TestTool(t, nil, "s3cmd", append([]string{"-c", config}, args...)...)
	}
}

// TestS3S3cmd drives s3cmd through multipart listing and abort and info (which reads the
// bucket's location, payer, lifecycle, policy, CORS and ACL); its signurl: TestS3PresignedV2Clients.
func TestS3S3cmd(t *testing.T) {
	e := newS3TestEnv(t)
	s3cmd := s3TestS3cmd(t, e)
	id := e.multipartUpload(t, "pending/big.bin", nil)
	if out := s3cmd("multipart", "s3://bucket"); !strings.Contains(out, id) || !strings.Contains(out, "pending/big.bin") {
		t.Errorf("s3cmd multipart lacks the upload %s:\n%s", id, out)
	}
	out := s3cmd("info", "s3://bucket")
	for _, want := range []string{"Expiration Rule: none", "Policy:    none", "CORS:      none", "svc: FULL_CONTROL"} {
		if !strings.Contains(out, want) {
			t.Errorf("s3cmd info lacks %q:\n%s", want, out)
		}
	}
	s3cmd("abortmp", "s3://bucket/pending/big.bin", id)
	if got := e.listUploads(t, ""); len(got.Upload) != 0 {
		t.Errorf("uploads after s3cmd abortmp: %q", got.items())
	}
}

// TestS3Rclone drives rclone's multipart listing and cleanup (which abort uploads older than
// max-age, 24 h unless given) and purge, none of which may log an error.
func TestS3Rclone(t *testing.T) {
	s3TestNeedTool(t, "rclone", "apt-get install rclone")
	e := newS3TestEnv(t)
	e.put(t, "dir/a.txt", []byte("a"))
	e.put(t, "dir/b.txt", []byte("b"))
	id := e.multipartUpload(t, "dir/pending.bin", nil)
	config := filepath.Join(t.TempDir(), "rclone.conf")
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"RCLONE_CONFIG_SVC_TYPE=s3", "RCLONE_CONFIG_SVC_PROVIDER=Other", "RCLONE_CONFIG_SVC_ENDPOINT=" + e.http.URL,
		"RCLONE_CONFIG_SVC_ACCESS_KEY_ID=" + s3TestAccessKey, "RCLONE_CONFIG_SVC_SECRET_ACCESS_KEY=" + s3TestSecretKey,
		"RCLONE_CONFIG_SVC_REGION=us-east-1", "RCLONE_CONFIG_SVC_FORCE_PATH_STYLE=true"}
	rclone := func(args ...string) string {
		out := s3TestTool(t, env, "rclone", append([]string{"--config", config, "--retries", "1", "--low-level-retries", "1"}, args...)...)
		if strings.Contains(out, "ERROR") || strings.Contains(out, "NotImplemented") {
			t.Errorf("rclone %s logged an error:\n%s", strings.Join(args, " "), out)
		}
		return out
	}
	if out := rclone("backend", "list-multipart-uploads", "svc:bucket"); !strings.Contains(out, id) || !strings.Contains(out, "dir/pending.bin") {
		t.Errorf("rclone backend list-multipart-uploads lacks the upload %s:\n%s", id, out)
	}
	rclone("cleanup", "svc:bucket")
	if got := e.listUploads(t, ""); len(got.Upload) != 1 {
		t.Errorf("uploads after rclone cleanup (24 h): %q; want the fresh one kept", got.items())
	}
	rclone("backend", "cleanup", "-o", "max-age=0s", "svc:bucket")
	if got := e.listUploads(t, ""); len(got.Upload) != 0 {
		t.Errorf("uploads after rclone backend cleanup -o max-age=0s: %q", got.items())
	}
	rclone("purge", "-v", "svc:bucket/dir")
	if got := e.listV2(t, "list-type=2"); len(got.items()) != 0 {
		t.Errorf("objects after rclone purge: %q", got.items())
	}
}
