package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bounds of the conformance suites, which run real clients in child processes.
const (
	// conformanceInstallTimeout bounds one `npm ci` (conformance/, testdata/npmproject).
	conformanceInstallTimeout = 5 * time.Minute
	// conformanceRunTimeout bounds one `node --test` script.
	conformanceRunTimeout = 3 * time.Minute
	// conformanceCLITimeout bounds one aws CLI command.
	conformanceCLITimeout = time.Minute
)

// npmInstalls holds, per directory, the outcome of installing its
// node_modules: at most one `npm ci` per directory and test binary.
var npmInstalls sync.Map // dir → *npmInstall

// npmInstall is one directory's install: done once, its error kept.
type npmInstall struct {
	once sync.Once
	err  error
}

// npmEnsureModules runs `npm ci` in dir (relative to the repository root)
// when its node_modules is missing or older than its package-lock.json,
// once per test binary, so `go test ./...` works on a fresh clone.
func npmEnsureModules(t testing.TB, dir string) {
	t.Helper()
	v, _ := npmInstalls.LoadOrStore(dir, &npmInstall{})
	in := v.(*npmInstall)
	in.once.Do(func() {
		lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
		if err != nil {
			in.err = err
			return
		}
		installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
		if err == nil && !installed.ModTime().Before(lock.ModTime()) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), conformanceInstallTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			in.err = errors.New("npm ci in " + dir + ": " + err.Error() + "\n" + string(out))
		}
	})
	if in.err != nil {
		t.Fatalf("install node modules: %v", in.err)
	}
}

// conformanceEnsureModules installs conformance/node_modules (npmEnsureModules).
func conformanceEnsureModules(t testing.TB) { npmEnsureModules(t, "conformance") }

// runConformance runs `node --test script` (script relative to the repository root) with env
// added to the environment, after making sure conformance/node_modules is installed. The test
// fails, showing node's output, when the script fails or outlives conformanceRunTimeout.
func runConformance(t *testing.T, script string, env []string) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("conformance: %s is not on PATH; install Node.js 20 or later (CI installs it): %v", tool, err)
		}
	}
	conformanceEnsureModules(t)
	abs, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), conformanceRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", abs)
	cmd.Dir = "conformance"
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("conformance: node --test %s did not finish within %v:\n%s", script, conformanceRunTimeout, out)
	}
	if err != nil {
		t.Fatalf("conformance: node --test %s: %v\n%s", script, err, out)
	}
	t.Logf("node --test %s:\n%s", script, out)
}

// conformanceS3Server starts an S3 server with a fresh root and the bucket "svc-conformance" on
// 127.0.0.1, returning its URL.
func conformanceS3Server(t *testing.T, access, secret string) string {
	t.Helper()
	s, err := newS3Server(filepath.Join(t.TempDir(), "s3"), access, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensureBucket("svc-conformance"); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestS3Conformance runs conformance/s3.test.mjs (the AWS SDK for JavaScript) against a server.
func TestS3Conformance(t *testing.T) {
	const access, secret = "AKIDCONFORMANCE", "conformance-secret"
	endpoint := conformanceS3Server(t, access, secret)
	runConformance(t, "conformance/s3.test.mjs", []string{
		"S3_ENDPOINT=" + endpoint,
		"S3_ACCESS_KEY_ID=" + access,
		"S3_SECRET_ACCESS_KEY=" + secret,
		"S3_BUCKET=svc-conformance",
	})
}

// TestS3AWSCLI runs aws s3 and s3api commands against a server, when the aws CLI is installed.
func TestS3AWSCLI(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skip("aws CLI not on PATH")
	}
	const access, secret = "AKIDAWSCLI", "aws-cli-secret"
	endpoint := conformanceS3Server(t, access, secret)
	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte("[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.txt")
	if err := os.WriteFile(small, []byte("hello from the aws cli\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bigData := make([]byte, 9<<20) // past the CLI's 8 MiB multipart threshold
	rand.Read(bigData)
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, bigData, 0o600); err != nil {
		t.Fatal(err)
	}
	downloaded := filepath.Join(dir, "downloaded.bin")
	env := append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+access,
		"AWS_SECRET_ACCESS_KEY="+secret,
		"AWS_CONFIG_FILE="+config,
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "no-credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_PAGER=",
	)
	tests := []struct {
		name string
		args []string
		want []string // substrings of the output
	}{
		{"cp small", []string{"s3", "cp", small, "s3://svc-conformance/cli/small.txt"}, []string{"upload:"}},
		{"cp multipart", []string{"s3", "cp", big, "s3://svc-conformance/cli/big.bin"}, []string{"upload:"}},
		{"ls", []string{"s3", "ls", "s3://svc-conformance/cli/"}, []string{"small.txt", "big.bin", "9437184"}},
		{"head multipart object", []string{"s3api", "head-object", "--bucket", "svc-conformance", "--key", "cli/big.bin"}, []string{"-2\\\"", "9437184"}},
		{"cp download", []string{"s3", "cp", "s3://svc-conformance/cli/big.bin", downloaded}, []string{"download:"}},
		{"rm", []string{"s3", "rm", "s3://svc-conformance/cli/small.txt"}, []string{"delete:"}},
		{"rm recursive", []string{"s3", "rm", "--recursive", "s3://svc-conformance/cli/"}, []string{"delete: s3://svc-conformance/cli/big.bin"}},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), conformanceCLITimeout)
		cmd := exec.CommandContext(ctx, "aws", append(tt.args, "--endpoint-url", endpoint)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: aws %s: %v\n%s", tt.name, strings.Join(tt.args, " "), err, out)
		}
		for _, want := range tt.want {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: aws %s output lacks %q:\n%s", tt.name, strings.Join(tt.args, " "), want, out)
			}
		}
	}
	got, err := os.ReadFile(downloaded)
	if err != nil || !bytes.Equal(got, bigData) {
		t.Errorf("downloaded %d bytes (%v); want the %d uploaded", len(got), err, len(bigData))
	}
	ctx, cancel := context.WithTimeout(t.Context(), conformanceCLITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "aws", "s3", "ls", "s3://svc-conformance/", "--endpoint-url", endpoint)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("bucket not empty after rm --recursive (%v):\n%s", err, out)
	}
}
