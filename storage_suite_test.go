package main

// storage_suite_test.go: one storage suite, two servers. Every case runs against svc's
// built-in S3 server (s3.go) and against versitygw (versitygw_test.go), a third party's
// reading of S3, each case in a fresh bucket: the cases of `storage` from user code
// (js_storage_test.go and below) and the S3 behaviour svc's client and the clients it is
// judged by rely on (s3_judge_test.go), where the built-in server is held to S3's word.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// storageSuiteCase is one case of the suite: run gets a fresh bucket of the server under test.
// skip names the servers the case does not hold for, and why (a limit of that server).
type storageSuiteCase struct {
	name string
	run  func(t *testing.T, target storageTarget)
	skip map[string]string
}

// storageSuiteBuiltin and storageSuiteVersityGW name the servers of the suite.
const (
	storageSuiteBuiltin   = "builtin"
	storageSuiteVersityGW = "versitygw"
)

// storageSuite lists the cases.
var storageSuite = []storageSuiteCase{
	{name: "PutGet", run: storageCasePutGet},
	{name: "EmptyBody", run: storageCaseEmptyBody},
	{name: "LargeBodyAndRanges", run: storageCaseLargeBodyAndRanges},
	{name: "Multipart20MiB", run: storageCaseMultipart},
	{name: "Streams", run: storageCaseStreams},
	{name: "AwkwardKeys", run: storageCaseAwkwardKeys},
	{name: "EmptyPathSegments", run: storageCaseEmptySegments, skip: map[string]string{
		storageSuiteVersityGW: "its posix backend maps keys to paths and lists a//b as a/b (README: keys with empty path segments are not portable)"}},
	{name: "List", run: storageCaseList},
	{name: "Presign", run: storageCasePresign},
	{name: "PresignExpiryAndTampering", run: storageCasePresignRefused},
	{name: "WrongSecret", run: storageCaseWrongSecret},
	{name: "Concurrent", run: storageCaseConcurrent},
	{name: "S3/MissingContentLength", run: s3JudgeMissingContentLength},
	{name: "S3/PayloadChecks", run: s3JudgePayloadChecks},
	{name: "S3/ConditionalReads", run: s3JudgeConditionalReads},
	{name: "S3/ConditionalWrites", run: s3JudgeConditionalWrites},
	{name: "S3/Errors", run: s3JudgeErrors},
	{name: "S3/ListObjectsV2", run: s3JudgeListV2},
	{name: "S3/ListEncodingTypeURL", run: s3JudgeListEncoding, skip: map[string]string{
		storageSuiteVersityGW: "v1.8.0 ignores encoding-type=url and lists keys as they are, without EncodingType (svc's client reads both)"}},
}

// TestStorageSuite runs every case against each server. A server starts once, in its
// subtest, and gives each case a fresh bucket.
func TestStorageSuite(t *testing.T) {
	servers := []struct {
		name  string
		start func(t *testing.T) (fresh func(t *testing.T) storageTarget)
	}{
		{storageSuiteBuiltin, func(*testing.T) func(t *testing.T) storageTarget {
			return func(t *testing.T) storageTarget { return newStorageTestServer(t, "storagekey", "storagesecret") }
		}},
		{storageSuiteVersityGW, func(t *testing.T) func(t *testing.T) storageTarget {
			endpoint, access, secret, bucket := startVersityGW(t)
			var n atomic.Int64
			return func(t *testing.T) storageTarget {
				target := storageTarget{Endpoint: endpoint, Bucket: fmt.Sprintf("%s-%d", bucket, n.Add(1)), Region: "us-east-1", AccessKey: access, SecretKey: secret}
				if err := storageTestCreateBucket(target); err != nil {
					t.Fatal(err)
				}
				return target
			}
		}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			fresh := srv.start(t)
			for _, c := range storageSuite {
				t.Run(c.name, func(t *testing.T) {
					if why := c.skip[srv.name]; why != "" {
						t.Skip(srv.name + ": " + why)
					}
					c.run(t, fresh(t))
				})
			}
		})
	}
}

// storageCaseEmptyBody: an empty string, empty bytes and an empty stream store empty
// objects (S3 refuses a PUT without Content-Length, which a chunked empty body was).
func storageCaseEmptyBody(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  const puts = [
    await storage.put("empty.txt", ""),
    await storage.put("empty.bin", new Uint8Array(0)),
    await storage.put("empty-stream", ReadableStream.from([])),
  ];
  const got = [];
  for (const k of ["empty.txt", "empty.bin", "empty-stream"]) {
    const o = await storage.get(k);
    got.push([o.size, await o.text(), (await storage.head(k)).size]);
  }
  return { sizes: puts.map(p => p.size), etags: puts.map(p => p.etag), got };
};`)
	want := `{"sizes":[0,0,0],"etags":["d41d8cd98f00b204e9800998ecf8427e","d41d8cd98f00b204e9800998ecf8427e","d41d8cd98f00b204e9800998ecf8427e"],"got":[[0,"",0],[0,"",0],[0,"",0]]}`
	if out != want {
		t.Errorf("empty bodies:\n got %s\nwant %s", out, want)
	}
}

// storageCaseMultipart: a 20 MiB stream goes up as a multipart upload of three parts and
// reads back whole and across a part boundary.
func storageCaseMultipart(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  let i = 0;
  const s = new ReadableStream({ pull(c) { if (i === 20) return c.close(); c.enqueue(new Uint8Array(1 << 20).fill(i++)); } });
  const put = await storage.put("big/20MiB", s, { contentType: "application/x-test" });
  const head = await storage.head("big/20MiB");
  const edge = await storage.get("big/20MiB", { range: { offset: (8 << 20) - 2, length: 4 } });
  const whole = await (await storage.get("big/20MiB")).bytes();
  let sum = 0;
  for (let j = 0; j < whole.length; j += 1 << 20) sum += whole[j];
  return { size: put.size, parts: put.etag.split("-")[1], head: [head.size, head.contentType], edge: Array.from(await edge.bytes()), len: whole.length, sum };
};`)
	want := `{"size":20971520,"parts":"3","head":[20971520,"application/x-test"],"edge":[7,7,8,8],"len":20971520,"sum":190}`
	if out != want {
		t.Errorf("20 MiB stream:\n got %s\nwant %s", out, want)
	}
}

// storageAwkwardKeys are keys whose characters URLs, SigV4 and XML each treat specially.
var storageAwkwardKeys = []string{
	"with space.txt", "plus+sign", "percent%41literal", "question?mark", "hash#tag", "amp&eq=x",
	"ünïcödé/ключ.txt", "emoji 😀", "tilde~star*paren()", `quote'dq"`, "semi;colon,comma:at@",
	"nested/a/b/c/d.txt", "bracket[]{}", "caret^pipe|back`tick",
}

// storageCaseAwkwardKeys: every awkward key stores, reads, heads, lists (with a prefix and a
// delimiter too), presigns and deletes as itself.
func storageCaseAwkwardKeys(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	keys, _ := json.Marshal(storageAwkwardKeys)
	out := storageMustRunJS(t, p, `
const keys = `+string(keys)+`;
exports.run = async () => {
  const bad = [];
  for (const k of keys) await storage.put(k, "body of " + k);
  for (const k of keys) {
    const o = await storage.get(k);
    const h = await storage.head(k);
    if (o === null || (await o.text()) !== "body of " + k || h === null || h.key !== k) bad.push(k);
  }
  const listed = (await storage.list()).objects.map(o => o.key);
  const nested = await storage.list({ prefix: "nested/a/", delimiter: "/" });
  const uni = await storage.list({ prefix: "ünïcödé/" });
  const urls = keys.map(k => storage.presign(k));
  await storage.delete(keys.slice(0, 7));
  for (const k of keys.slice(7)) await storage.delete(k);
  return { bad, listed, nested: [nested.objects.length, nested.prefixes], uni: uni.objects.map(o => o.key), urls, left: (await storage.list()).objects.length };
};`)
	var got struct {
		Bad, Listed, Uni, URLs []string
		Nested                 []any
		Left                   int
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	sorted := append([]string(nil), storageAwkwardKeys...)
	slices.Sort(sorted) // S3 lists keys in the order of their UTF-8 bytes
	if len(got.Bad) != 0 || strings.Join(got.Listed, "\n") != strings.Join(sorted, "\n") || got.Left != 0 {
		t.Errorf("awkward keys: unreadable %q; listed %q, want %q; %d left after delete", got.Bad, got.Listed, sorted, got.Left)
	}
	if fmt.Sprint(got.Nested) != "[0 [nested/a/b/]]" || fmt.Sprint(got.Uni) != "[ünïcödé/ключ.txt]" {
		t.Errorf("prefix listings: nested %v, unicode %v", got.Nested, got.Uni)
	}
	// The presigned URLs were made before the deletes: each now reaches its key, which is gone.
	for i, u := range got.URLs {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "NoSuchKey") {
			t.Errorf("presigned GET of deleted %q: %s %s", storageAwkwardKeys[i], resp.Status, body)
		}
	}
}

// storageCaseEmptySegments: a key with an empty path segment is its own key.
func storageCaseEmptySegments(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  await storage.put("a//b", "double");
  return { listed: (await storage.list()).objects.map(o => o.key), text: await (await storage.get("a//b")).text(), single: await storage.head("a/b") };
};`)
	if want := `{"listed":["a//b"],"text":"double","single":null}`; out != want {
		t.Errorf("a//b:\n got %s\nwant %s", out, want)
	}
}

// storageCasePresignRefused: an expired presigned URL and tampered ones are refused.
func storageCasePresignRefused(t *testing.T, target storageTarget) {
	c, err := newStorageClient(target)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"dl/a.txt", "dl/b.txt"} {
		if _, err := c.put(ctx, k, []byte("secret "+k), "text/plain"); err != nil {
			t.Fatal(err)
		}
	}
	valid, err := c.presign(http.MethodGet, "dl/a.txt", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Signed two hours ago for one hour: expired, whatever the wall clock does meanwhile.
	c.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	expired, err := c.presign(http.MethodGet, "dl/a.txt", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sig := valid[strings.LastIndex(valid, "=")+1:]
	flipped := sig[:len(sig)-1] + string("01"[(strings.IndexByte("0123456789abcdef", sig[len(sig)-1])+1)%2])
	for _, tc := range []struct{ name, url, code string }{
		{"valid", valid, ""},
		{"expired", expired, "AccessDenied"},
		{"other key", strings.Replace(valid, "dl/a.txt", "dl/b.txt", 1), "SignatureDoesNotMatch"},
		{"longer expiry", strings.Replace(valid, "X-Amz-Expires=3600", "X-Amz-Expires=7200", 1), "SignatureDoesNotMatch"},
		{"signature", strings.TrimSuffix(valid, sig) + flipped, "SignatureDoesNotMatch"},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case tc.code == "" && (resp.StatusCode != http.StatusOK || string(body) != "secret dl/a.txt"):
			t.Errorf("%s presigned GET: %s %s", tc.name, resp.Status, body)
		case tc.code != "" && (resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "<Code>"+tc.code+"</Code>")):
			t.Errorf("%s presigned GET: %s %s; want 403 %s", tc.name, resp.Status, body, tc.code)
		}
	}
}

// storageCaseConcurrent: 20 puts, then 20 gets and heads, all at once, each see their own key.
func storageCaseConcurrent(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  const ids = Array.from({ length: 20 }, (_, i) => i);
  await Promise.all(ids.map(i => storage.put("c/" + i, "value " + i + " ".repeat(i * 1000))));
  const texts = await Promise.all(ids.map(async i => (await (await storage.get("c/" + i)).text()).trim()));
  const sizes = await Promise.all(ids.map(async i => (await storage.head("c/" + i)).size));
  const page = await storage.list({ prefix: "c/" });
  return { wrong: ids.filter(i => texts[i] !== "value " + i || sizes[i] !== ("value " + i).length + i * 1000), listed: page.objects.length };
};`)
	if want := `{"wrong":[],"listed":20}`; out != want {
		t.Errorf("concurrent calls:\n got %s\nwant %s", out, want)
	}
}
