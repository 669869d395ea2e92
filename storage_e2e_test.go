package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// storageE2EWorkflow writes text, JSON and bytes from a step, reads them back, lists them
// and presigns one; storageE2EWorkflowCode calls storage in workflow code, which fails.
const (
	storageE2EWorkflow = `import { storage } from "svc";
async function write(stamp: string) {
  "use step";
  await storage.put("notes/hello.txt", "hello from " + stamp);
  await storage.put("data/config.json", JSON.stringify({ stamp, n: 3 }), { contentType: "application/json" });
  await storage.put("data/raw.bin", new Uint8Array([0, 1, 2, 253, 254, 255]));
  const text = await (await storage.get("notes/hello.txt"))!.text();
  const json = await (await storage.get("data/config.json"))!.json<{ n: number }>();
  const page = await storage.list({ prefix: "data/" });
  const url = storage.presign("notes/hello.txt", { expiresIn: 300 });
  return { text, n: json.n, keys: page.objects.map((o) => o.key), presigned: url.includes("X-Amz-Signature=") };
}
export default async function files() {
  "use workflow";
  return await write("svc");
}`
	storageE2EWorkflowCode = `import { storage } from "svc";
export default async function misplaced() {
  "use workflow";
  await storage.get("notes/hello.txt");
}`
)

// storageE2EWant is the output of storageE2EWorkflow.
const storageE2EWant = `{"keys":["data/config.json","data/raw.bin"],"n":3,"presigned":true,"text":"hello from svc"}`

// storageE2ERun starts the files workflow on d and checks its output.
func storageE2ERun(t *testing.T, d *devProcess) {
	t.Helper()
	run := startAndWait(t, d, "files")
	var out map[string]any
	json.Unmarshal(run.Output, &out)
	got, _ := json.Marshal(out)
	if run.Status != runCompleted || string(got) != storageE2EWant {
		t.Fatalf("files run = %s %s %+v; want %s", run.Status, run.Output, run.Error, storageE2EWant)
	}
}

// TestStorageEndToEnd runs a workflow whose step writes to the project's bucket under svc
// dev, then reads what it wrote from outside with the AWS CLI and svc env's credentials.
func TestStorageEndToEnd(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/files.workflow.ts", storageE2EWorkflow)
	writeFile(t, dir, "workflows/misplaced.workflow.ts", storageE2EWorkflowCode)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test"))
	storageE2ERun(t, d)
	if run := startAndWait(t, d, "misplaced"); run.Status != runFailed || run.Error == nil || !strings.Contains(run.Error.Message, storageWorkflowMessage) {
		t.Errorf("storage in workflow code: run %s %+v; want failed with %q", run.Status, run.Error, storageWorkflowMessage)
	}

	s3TestNeedTool(t, "aws", "apt-get install awscli")
	out, stderr, code := cli(t, dir, baseEnv(), "--json", "env")
	var env struct{ Data devEnvOutput }
	if err := json.Unmarshal([]byte(out), &env); code != 0 || err != nil {
		t.Fatalf("svc env --json = exit %d %q %q", code, out, stderr)
	}
	e := env.Data.Env
	config := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(config, []byte("[default]\nregion = "+e["S3_REGION"]+"\ns3 =\n  addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	awsEnv := []string{"AWS_ACCESS_KEY_ID=" + e["S3_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY=" + e["S3_SECRET_ACCESS_KEY"], "AWS_CONFIG_FILE=" + config,
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none"), "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER="}
	aws := func(args ...string) string {
		return s3TestTool(t, awsEnv, "aws", append(args, "--endpoint-url", e["S3_ENDPOINT"])...)
	}
	bucket := "s3://" + e["S3_BUCKET"] + "/"
	if ls := aws("s3", "ls", "--recursive", bucket); !strings.Contains(ls, "notes/hello.txt") || !strings.Contains(ls, "data/config.json") || !strings.Contains(ls, "data/raw.bin") {
		t.Errorf("aws s3 ls --recursive %s:\n%s", bucket, ls)
	}
	// One sync brings every object down (each AWS CLI run costs a second or more).
	local := t.TempDir()
	aws("s3", "sync", bucket, local)
	for name, want := range map[string]string{
		"notes/hello.txt":  "hello from svc",
		"data/config.json": `{"stamp":"svc","n":3}`,
		"data/raw.bin":     "\x00\x01\x02\xfd\xfe\xff",
	} {
		if got, err := os.ReadFile(filepath.Join(local, name)); err != nil || string(got) != want {
			t.Errorf("aws s3 sync: %s = %q (%v); want %q", name, got, err, want)
		}
	}
}

// TestStorageExternalEndpoint runs the same workflow with SVC_S3_ENDPOINT naming another S3
// server, versitygw (keys from .env): the objects land there, and svc dev opens no built-in
// object storage beside it.
func TestStorageExternalEndpoint(t *testing.T) {
	// The bucket user code gets is svc's (S3_BUCKET), made on versitygw beside its own.
	endpoint, access, secret, _ := startVersityGW(t)
	target := storageTarget{Endpoint: endpoint, Bucket: runtimeBucket, AccessKey: access, SecretKey: secret}
	if err := storageTestCreateBucket(target); err != nil {
		t.Fatal(err)
	}
	dir := projectDir(t)
	writeFile(t, dir, ".env", "S3_ACCESS_KEY_ID="+access+"\nS3_SECRET_ACCESS_KEY="+secret+"\n")
	writeFile(t, dir, "workflows/files.workflow.ts", storageE2EWorkflow)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test", "SVC_S3_ENDPOINT="+target.Endpoint))
	if d.payload.Services.S3Endpoint != target.Endpoint {
		t.Fatalf("payload S3 endpoint = %q; want %q", d.payload.Services.S3Endpoint, target.Endpoint)
	}
	storageE2ERun(t, d)
	ext, err := newStorageClient(target)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ext.get(context.Background(), "notes/hello.txt", nil)
	if err != nil {
		t.Fatalf("the external endpoint lacks the object: %v", err)
	}
	got, _ := io.ReadAll(b.Body)
	b.Body.Close()
	if string(got) != "hello from svc" {
		t.Errorf("external object = %q", got)
	}
	// Nothing listens where the built-in object storage would (API port + 2).
	api, err := url.Parse(d.payload.EmulatorURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(api.Port())
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port+2), 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("with SVC_S3_ENDPOINT set, something listens on the built-in object storage port %d", port+2)
	}
}
