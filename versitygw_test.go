package main

// versitygw_test.go: versitygw (github.com/versity/versitygw, Apache-2.0), an S3 server nobody
// here wrote, built from its Go module at a pinned version and started on loopback with a
// posix directory, so the storage suite (storage_suite_test.go) judges svc's S3 client and
// server by a third party's reading of S3. .ci/run builds it into the cache directory this
// file looks in; elsewhere the first test that needs it builds it there (about a minute).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// versityGWVersion is the versitygw the suite runs against.
const versityGWVersion = "v1.8.0"

// versityGWModule is what `go install` builds.
const versityGWModule = "github.com/versity/versitygw/cmd/versitygw"

// versityGWBuild builds versitygw at most once per test process.
var versityGWBuild struct {
	once sync.Once
	path string
	err  error
}

// versityGWDir is where the pinned versitygw binary is cached:
// <user cache dir>/svc-test/versitygw-<version> (.ci/run builds into the same place).
func versityGWDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "svc-test", "versitygw-"+versityGWVersion), nil
}

// versityGWBinary returns the path of the pinned versitygw, building it into its cache
// directory if absent. It never skips: a suite that cannot reach the third-party server fails
// and says how to build it.
func versityGWBinary(t testing.TB) string {
	t.Helper()
	versityGWBuild.once.Do(func() {
		dir, err := versityGWDir()
		if err != nil {
			versityGWBuild.err = err
			return
		}
		bin := filepath.Join(dir, "versitygw")
		if _, err := os.Stat(bin); err == nil {
			versityGWBuild.path = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			versityGWBuild.err = err
			return
		}
		// Build into a directory of its own, then rename: another test process building at the
		// same time never sees a half-written binary. The build runs outside this module.
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			versityGWBuild.err = err
			return
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("go", "install", versityGWModule+"@"+versityGWVersion)
		cmd.Dir, cmd.Env = tmp, append(os.Environ(), "GOBIN="+tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			versityGWBuild.err = fmt.Errorf("%v\n%s", err, out)
			return
		}
		if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
			versityGWBuild.err = err
			return
		}
		versityGWBuild.path = bin
	})
	if versityGWBuild.err != nil {
		dir, _ := versityGWDir()
		t.Fatalf("versitygw %s, the third-party S3 server the storage suite runs against, is not built: %v\n"+
			"Build it once with `GOBIN=%s go install %s@%s` (it needs the Go module proxy) and rerun.",
			versityGWVersion, versityGWBuild.err, dir, versityGWModule, versityGWVersion)
	}
	return versityGWBuild.path
}

// startVersityGW starts versitygw on a loopback port over a fresh posix directory, with a
// bucket made, and stops it when t ends. It returns what an S3 client needs (region
// us-east-1, path-style).
func startVersityGW(t testing.TB) (endpoint, access, secret, bucket string) {
	t.Helper()
	bin := versityGWBinary(t)
	access, secret, bucket = "versityaccess", "versity-secret-0123456789", "judge"
	var lastErr error
	// A free port may be taken between picking it and versitygw binding it: try a few.
	for range 3 {
		port, err := pgTestFreePort()
		if err != nil {
			t.Fatal(err)
		}
		endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
		var logs bytes.Buffer
		cmd := exec.Command(bin, "--port", "127.0.0.1:"+strconv.Itoa(port), "posix", t.TempDir())
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+access, "ROOT_SECRET_KEY="+secret)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		target := storageTarget{Endpoint: endpoint, Bucket: bucket, AccessKey: access, SecretKey: secret}
		if lastErr = versityGWReady(target, exited); lastErr == nil {
			t.Cleanup(stop)
			return endpoint, access, secret, bucket
		}
		stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, logs.Bytes())
	}
	t.Fatalf("versitygw did not come up: %v", lastErr)
	return
}

// versityGWReady waits (boundedly) until the server answers, then makes target's bucket.
func versityGWReady(target storageTarget, exited <-chan error) error {
	var err error
	for range 100 {
		select {
		case werr := <-exited:
			return fmt.Errorf("versitygw exited: %v", werr)
		default:
		}
		if err = storageTestCreateBucket(target); err == nil {
			return nil
		}
		var se *storageError
		if errors.As(err, &se) && se.Status != 0 {
			return err // it answered, and refused
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// storageTestCreateBucket makes target's bucket (CreateBucket).
func storageTestCreateBucket(target storageTarget) error {
	c, err := newStorageClient(target)
	if err != nil {
		return err
	}
	resp, err := c.do(context.Background(), "create bucket", "", http.MethodPut, c.objectURL("", nil), nil, nil, http.StatusOK)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
