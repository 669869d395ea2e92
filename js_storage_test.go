package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// storageTestPlatform returns a platform whose storage reaches a fresh built-in server.
func storageTestPlatform(t testing.TB) *jsPlatform {
	t.Helper()
	return storageTargetPlatform(t, newStorageTestServer(t, "storagekey", "storagesecret"))
}

// storageTargetPlatform returns a platform whose storage reaches target.
func storageTargetPlatform(t testing.TB, target storageTarget) *jsPlatform {
	t.Helper()
	p := newJSPlatform()
	if err := storageConfigure(p, target); err != nil {
		t.Fatal(err)
	}
	return p
}

// storageRunJS evaluates src (CommonJS, storage in scope as `storage`) in a step-like VM of
// p and returns what its exported async run() resolves with, as JSON, or what it throws.
func storageRunJS(t testing.TB, p *jsPlatform, src string) (string, error) {
	t.Helper()
	prog, err := goja.Compile("storage_test.js", `const { storage } = require("svc");`+"\n"+src, false)
	if err != nil {
		t.Fatal(err)
	}
	var l *jsLoop
	_, exports, err := newModuleVM(&jsModule{File: "storage_test.js", Program: prog}, vmOptions{
		Log:     discardLogger(),
		Setup:   func(vm *goja.Runtime) { l = newJSLoop(vm) },
		Install: func(ambient *goja.Object) { p.install(l, ambient) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v, err := l.await(ctx, callAsync(l.vm, exports.Get("run")))
	if err != nil {
		return "", err
	}
	out, err := jsonStringify(l.vm, v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), nil
}

// storageMustRunJS is storageRunJS failing the test on a throw.
func storageMustRunJS(t testing.TB, p *jsPlatform, src string) string {
	t.Helper()
	out, err := storageRunJS(t, p, src)
	if err != nil {
		var thrown *jsThrown
		if errors.As(err, &thrown) {
			t.Fatalf("run threw %s: %v\n%s", thrown.name(), err, thrown.stack())
		}
		t.Fatal(err)
	}
	return out
}

func storageCasePutGet(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  const r = [];
  r.push(await storage.put("t.txt", "héllo"));
  r.push(await storage.put("d.json", JSON.stringify({ a: [1, 2] }), { contentType: "application/json" }));
  r.push(await storage.put("b.bin", new Uint8Array([0, 1, 2, 255])));
  r.push(await storage.put("ab.bin", new Uint8Array([9, 8, 7, 6]).buffer));
  r.push(await storage.put("view.bin", new DataView(new Uint8Array([1, 2, 3, 4, 5]).buffer, 1, 3)));
  const t = await storage.get("t.txt");
  const d = await storage.get("d.json");
  const b = await storage.get("b.bin");
  const ab = await storage.get("ab.bin");
  const view = await storage.get("view.bin");
  const head = await storage.head("d.json");
  return {
    puts: r,
    text: await t.text(), textType: t.contentType, textSize: t.size, isDate: t.lastModified instanceof Date,
    fresh: Math.abs(Date.now() - t.lastModified.getTime()) < 60000, sameEtag: t.etag === r[0].etag,
    json: await d.json(), jsonType: d.contentType,
    bytes: Array.from(await b.bytes()), bytesIsU8: (await storage.get("b.bin").then(o => o.bytes())) instanceof Uint8Array,
    ab: Array.from(new Uint8Array(await ab.arrayBuffer())), binType: b.contentType,
    view: Array.from(await view.bytes()),
    head: { key: head.key, size: head.size, type: head.contentType, etag: head.etag === r[1].etag, date: head.lastModified instanceof Date },
    missing: await storage.get("nope"), missingHead: await storage.head("nope"),
  };
};`)
	var got struct {
		Puts []struct {
			Key  string
			Etag string
			Size int
		}
		Text, TextType, JSONType, BinType  string
		TextSize                           int
		IsDate, Fresh, SameEtag, BytesIsU8 bool
		JSON                               map[string][]int
		Bytes, AB, View                    []int
		Head                               struct {
			Key, Type  string
			Size       int
			Etag, Date bool
		}
		Missing, MissingHead any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Puts) != 5 || got.Puts[0].Key != "t.txt" || got.Puts[0].Size != len("héllo") || len(got.Puts[0].Etag) != 32 || got.Puts[4].Size != 3 {
		t.Errorf("put results = %+v", got.Puts)
	}
	if got.Text != "héllo" || got.TextType != "text/plain; charset=utf-8" || got.TextSize != 6 || !got.IsDate || !got.Fresh || !got.SameEtag {
		t.Errorf("text object = %s", out)
	}
	if len(got.JSON["a"]) != 2 || got.JSONType != "application/json" {
		t.Errorf("json = %v (%s)", got.JSON, got.JSONType)
	}
	if !got.BytesIsU8 || len(got.Bytes) != 4 || got.Bytes[3] != 255 || got.BinType != "application/octet-stream" {
		t.Errorf("bytes = %v %v %s", got.Bytes, got.BytesIsU8, got.BinType)
	}
	if len(got.AB) != 4 || got.AB[0] != 9 || len(got.View) != 3 || got.View[0] != 2 {
		t.Errorf("arrayBuffer = %v, DataView = %v", got.AB, got.View)
	}
	if got.Head.Key != "d.json" || got.Head.Size != 11 || got.Head.Type != "application/json" || !got.Head.Etag || !got.Head.Date {
		t.Errorf("head = %+v", got.Head)
	}
	if got.Missing != nil || got.MissingHead != nil {
		t.Errorf("missing key: get = %v, head = %v; want null", got.Missing, got.MissingHead)
	}
}

func storageCaseLargeBodyAndRanges(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  const big = "0123456789".repeat(20000); // 200,000 bytes: past what get() reads eagerly
  await storage.put("big", big);
  const o = await storage.get("big");
  const text = await o.text();
  let again;
  try { await o.bytes(); } catch (e) { again = e.name + ": " + e.message; }
  const part = await storage.get("big", { range: { offset: 10, length: 5 } });
  const tail = await storage.get("big", { range: { offset: 199998 } });
  const suffix = await storage.get("big", { range: { suffix: 3 } });
  let past;
  try { await storage.get("big", { range: { offset: 200000 } }); } catch (e) { past = [e.name, e.code, e.status]; }
  const unread = await storage.get("big"); // never read: its connection closes with the client timeout
  return {
    ok: text === big, again,
    part: await part.text(), partSize: part.size, partRange: part.range,
    tail: await tail.text(), suffix: await suffix.text(), suffixRange: suffix.range,
    past, unreadSize: unread.size, wholeRange: o.range === undefined,
  };
};`)
	for _, want := range []string{
		`"ok":true`, `"again":"TypeError: storage.get: the body of \"big\" was already read`,
		`"part":"01234","partSize":200000,"partRange":{"offset":10,"length":5}`,
		`"tail":"89","suffix":"789","suffixRange":{"offset":199997,"length":3}`,
		`"past":["StorageError","InvalidRange",416]`, `"unreadSize":200000`, `"wholeRange":true`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("result lacks %s:\n%s", want, out)
		}
	}
}

func storageCaseList(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  for (const k of ["a/1", "a/2", "a/b/3", "b/4", "c"]) await storage.put(k, k);
  const pages = [];
  let cursor;
  for (let i = 0; i < 10; i++) {
    const page = await storage.list({ limit: 2, cursor });
    pages.push({ keys: page.objects.map(o => o.key), truncated: page.truncated, hasCursor: "cursor" in page });
    if (!page.truncated) break;
    cursor = page.cursor;
  }
  const dirs = await storage.list({ prefix: "a/", delimiter: "/" });
  const top = await storage.list({ delimiter: "/" });
  const o = dirs.objects[0];
  await storage.delete("c");
  await storage.delete(["a/1", "a/2", "missing"]);
  const after = await storage.list();
  return {
    pages, dirKeys: dirs.objects.map(o => o.key), dirPrefixes: dirs.prefixes, topPrefixes: top.prefixes,
    entry: { size: o.size, etag: o.etag.length, date: o.lastModified instanceof Date },
    after: after.objects.map(o => o.key), emptyDelete: await storage.delete([]),
  };
};`)
	want := `{"pages":[{"keys":["a/1","a/2"],"truncated":true,"hasCursor":true},{"keys":["a/b/3","b/4"],"truncated":true,"hasCursor":true},{"keys":["c"],"truncated":false,"hasCursor":false}],` +
		`"dirKeys":["a/1","a/2"],"dirPrefixes":["a/b/"],"topPrefixes":["a/","b/"],"entry":{"size":3,"etag":32,"date":true},"after":["a/b/3","b/4"]}`
	if out != want {
		t.Errorf("list:\n got %s\nwant %s", out, want)
	}
}

func storageCasePresign(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  await storage.put("dl/file name.txt", "download me");
  return {
    get: storage.presign("dl/file name.txt"),
    put: storage.presign("up.txt", { method: "PUT", expiresIn: 60 }),
    week: storage.presign("up.txt", { expiresIn: 604800 }),
  };
};`)
	var urls struct{ Get, Put, Week string }
	if err := json.Unmarshal([]byte(out), &urls); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(urls.Get, "X-Amz-Expires=3600") || !strings.Contains(urls.Put, "X-Amz-Expires=60") || !strings.Contains(urls.Week, "X-Amz-Expires=604800") {
		t.Errorf("presigned URLs: %s", out)
	}
	resp, err := http.Get(urls.Get)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "download me" {
		t.Errorf("presigned GET: %s %q", resp.Status, body)
	}
	req, _ := http.NewRequest(http.MethodPut, urls.Put, strings.NewReader("uploaded"))
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %s", resp.Status)
	}
	out = storageMustRunJS(t, p, `exports.run = async () => (await storage.get("up.txt")).text();`)
	if out != `"uploaded"` {
		t.Errorf("after presigned PUT: %s", out)
	}
	// A presigned PUT URL does not allow GET.
	if resp, err = http.Get(urls.Put); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET with a PUT URL: %s", resp.Status)
	}
}

func TestStorageJSInvalidArguments(t *testing.T) {
	p := storageTestPlatform(t)
	tests := []struct{ call, want string }{
		{`storage.put("", "x")`, "storage.put: the key must not be empty"},
		{`storage.put(42, "x")`, "storage.put: the key must be a string, not a number"},
		{`storage.get("k".repeat(1025))`, "storage.get: the key is 1025 bytes of UTF-8; at most 1024 are allowed"},
		{`storage.head("\uD800x")`, "storage.head: the key holds a lone UTF-16 surrogate"},
		{`storage.put("k", { a: 1 })`, `storage.put: the body must be a string, Uint8Array, ArrayBuffer or ReadableStream, not an object (for JSON pass JSON.stringify(value) with contentType "application/json")`},
		{`storage.put("k", undefined)`, "storage.put: the body must be a string, Uint8Array, ArrayBuffer or ReadableStream, not undefined"},
		{`storage.put("k", "x", { contenttype: "a/b" })`, `storage.put: unknown option "contenttype"; the options are contentType`},
		{`storage.put("k", "x", { contentType: "a/b\r\nX: y" })`, "storage.put: contentType must not hold control characters"},
		{`storage.put("k", "x", "text/plain")`, "storage.put: options must be an object, not a string"},
		{`storage.get("k", { range: { offset: -1 } })`, "storage.get: range.offset must be an integer from 0 to"},
		{`storage.get("k", { range: { offset: 0, length: 0 } })`, "storage.get: range.length must be an integer from 1 to"},
		{`storage.get("k", { range: { suffix: 2, offset: 1 } })`, "storage.get: range takes { offset, length? } or { suffix }, not both"},
		{`storage.get("k", { range: { offset: 1.5 } })`, "storage.get: range.offset must be an integer"},
		{`storage.get("k", { range: "bytes=0-1" })`, "storage.get: range must be { offset, length? } or { suffix }"},
		{`storage.list({ limit: 0 })`, "storage.list: limit must be an integer from 1 to 1000, not 0"},
		{`storage.list({ limit: 1001 })`, "storage.list: limit must be an integer from 1 to 1000"},
		{`storage.list({ prefix: 3 })`, "storage.list: prefix must be a string"},
		{`storage.list({ delimiter: "\uDC00" })`, "storage.list: delimiter holds a lone UTF-16 surrogate"},
		{`storage.delete(["a", ""])`, "storage.delete: keys[1]: the key must not be empty"},
		{`storage.delete(null)`, "storage.delete: the argument must be a key or an array of keys: the key must be a string, not null"},
		{`storage.presign("k", { method: "DELETE" })`, `storage.presign: method must be "GET" or "PUT", not "DELETE"`},
		{`storage.presign("k", { expiresIn: 604801 })`, "storage.presign: expiresIn must be an integer from 1 to 604800, not 604801"},
		{`storage.presign("")`, "storage.presign: the key must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			_, err := storageRunJS(t, p, "exports.run = async () => "+tt.call+";")
			var thrown *jsThrown
			if !errors.As(err, &thrown) || thrown.name() != "TypeError" || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("%s: error %v; want TypeError %q", tt.call, err, tt.want)
			}
		})
	}
}

// storageCaseWrongSecret: with wrong keys, the endpoint's answer is a StorageError with its
// code and status (the message is the server's own).
func storageCaseWrongSecret(t *testing.T, target storageTarget) {
	target.SecretKey = "wrong"
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
exports.run = async () => {
  try { await storage.put("k", "x"); } catch (e) {
    return { name: e.name, code: e.code, status: e.status, message: e.message, isError: e instanceof Error };
  }
};`)
	want := `{"name":"StorageError","code":"SignatureDoesNotMatch","status":403,"message":"storage put \"k\": SignatureDoesNotMatch (403): `
	if !strings.HasPrefix(out, want) || !strings.HasSuffix(out, `","isError":true}`) {
		t.Errorf("wrong secret:\n got %s\nwant %s…", out, want)
	}
}

func TestStorageJSNotConfigured(t *testing.T) {
	// No object storage: every call says so.
	for _, call := range []string{`storage.get("k")`, `storage.presign("k")`} {
		_, err := storageRunJS(t, newJSPlatform(), "exports.run = async () => "+call+";")
		if err == nil || !strings.HasPrefix(err.Error(), "object storage is not configured") {
			t.Errorf("%s without storage: %v", call, err)
		}
	}
}

func TestStorageJSWorkflowVM(t *testing.T) {
	prog := goja.MustCompile("wf.js", `const { storage } = require("svc"); exports.run = (m) => storage[m]("k");`, false)
	var p *jsPlatform
	var vm *goja.Runtime
	_, exports, err := newModuleVM(&jsModule{File: "wf.js", Program: prog}, vmOptions{
		Log:     discardLogger(),
		Setup:   func(r *goja.Runtime) { vm = r },
		Install: func(ambient *goja.Object) { p.installWorkflow(vm, ambient) },
	})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := goja.AssertFunction(exports.Get("run"))
	for _, m := range storageMembers {
		_, err := run(goja.Undefined(), vm.ToValue(m))
		var ex *goja.Exception
		if !errors.As(err, &ex) || ex.Value().ToObject(vm).Get("name").String() != "Error" || ex.Value().ToObject(vm).Get("message").String() != storageWorkflowMessage {
			t.Errorf("storage.%s in a workflow VM: %v", m, err)
		}
	}
}

func storageCaseStreams(t *testing.T, target storageTarget) {
	p := storageTargetPlatform(t, target)
	out := storageMustRunJS(t, p, `
// chunks returns a stream of n chunks of size bytes, chunk i filled with i, pulled lazily.
const chunks = (n, size) => {
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i === n) return c.close();
      c.enqueue(new Uint8Array(size).fill(i++));
    },
  });
};
// drain reads a stream to its end: byte count and the first byte of each 1 MiB.
const drain = async (stream) => {
  const reader = stream.getReader();
  let n = 0, mark = 0;
  const marks = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return { n, marks };
    for (; mark < n + value.length; mark += 1 << 20) marks.push(value[mark - n]);
    n += value.length;
  }
};
exports.run = async () => {
  const small = await storage.put("s", ReadableStream.from(["str", "ing ", new Uint8Array([98, 121, 116, 101, 115])]), { contentType: "text/plain" });
  const smallText = await (await storage.get("s")).text();
  // 17 MiB: past one part, so a multipart upload of three parts.
  const big = await storage.put("big", chunks(17, 1 << 20));
  const o = await storage.get("big");
  const json = JSON.stringify(o);
  const read = await drain(o.body);
  let after;
  try { await o.text(); } catch (e) { after = e.name; }
  const t = await storage.get("s");
  await t.text();
  let bodyAfterText;
  try { await t.body.getReader().read(); } catch (e) { bodyAfterText = e.message; }
  let failed;
  const bad = new ReadableStream({ pull(c) { c.error(new RangeError("source broke")); } });
  try { await storage.put("bad", bad); } catch (e) { failed = e.name + ": " + e.message; }
  let badChunk;
  try { await storage.put("bad", ReadableStream.from([{}])); } catch (e) { badChunk = e.name + ": " + e.message; }
  let locked;
  const l = chunks(1, 1);
  l.getReader();
  try { await storage.put("bad", l); } catch (e) { locked = e.name; }
  return { small, smallText, big: [big.size, big.etag.slice(-2)], json, read, after, bodyAfterText, failed, badChunk, locked, stored: await storage.head("bad") };
};`)
	for _, want := range []string{
		`"small":{"key":"s","etag":"`, `"size":12}`, `"smallText":"string bytes"`,
		`"big":[17825792,"-3"]`, `"read":{"n":17825792,"marks":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`,
		`"json":"{\"key\":\"big\",\"size\":17825792,`, `"after":"TypeError"`,
		`"bodyAfterText":"read body: the body was already read by text(), json(), bytes() or arrayBuffer()"`,
		`"failed":"RangeError: source broke"`,
		`"badChunk":"TypeError: storage.put: the body stream gave an object; its chunks must be Uint8Array (or another ArrayBuffer view) or string"`,
		`"locked":"TypeError"`, `"stored":null`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("result lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `\"body\"`) {
		t.Errorf("JSON of a get result holds its body: %s", out)
	}
}

func TestStorageDTSPassesTSCStrict(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/files.workflow.ts", `import { storage, type StorageError } from "svc";
async function files(n: number) {
  "use step";
  const put = await storage.put("a.txt", "hello", { contentType: "text/plain" });
  await storage.put("b.bin", new Uint8Array([1, 2]));
  await storage.put("c.bin", new ArrayBuffer(2));
  const o = await storage.get("a.txt", { range: { offset: 0, length: 2 } });
  if (o === null) return 0;
  const text: string = await o.text();
  const data: { x: number } = await o.json<{ x: number }>();
  const bytes: Uint8Array = await o.bytes();
  const when: Date = o.lastModified;
  const reader = o.body.getReader();
  const chunk = await reader.read();
  if (!chunk.done) chunk.value.byteLength;
  await storage.put("d.bin", o.body);
  await storage.get("a.txt", { range: { suffix: 1 } });
  const h = await storage.head("a.txt");
  const page = await storage.list({ prefix: "a", delimiter: "/", limit: 10, cursor: undefined });
  const next: string | undefined = page.truncated ? page.cursor : undefined;
  await storage.delete(["a.txt", "b.bin"]);
  await storage.delete("c.bin");
  const url: string = storage.presign("a.txt", { method: "PUT", expiresIn: 60 });
  try { await storage.head("x"); } catch (e) { const se = e as StorageError; se.code + se.status; }
  return put.size + text.length + data.x + bytes.length + when.getTime() + (h?.size ?? 0) + page.objects.length + page.prefixes.length + url.length + (next ?? "").length + n;
}
export default async function filesWorkflow() {
  "use workflow";
  return files(1);
}`)
	if out, err := typecheck(t, dir); err != nil {
		t.Fatalf("tsc over storage usage: %v\n%s", err, out)
	}
	writeFile(t, dir, "workflows/files.workflow.ts", `import { storage } from "svc";
export default async function bad() {
  "use workflow";
  await storage.put("k", { a: 1 });
  await storage.list({ max: 3 });
  storage.presign("k", { method: "DELETE" });
}`)
	out, err := typecheck(t, dir)
	if err == nil || strings.Count(out, "files.workflow.ts") < 3 {
		t.Fatalf("tsc accepted wrong storage calls (err %v):\n%s", err, out)
	}
}

// BenchmarkStepStoragePut runs a step whose body is one storage.put of a 100-byte object
// against the built-in endpoint on loopback, through the step runner (pooled step VMs), as
// the engine calls steps; "client" is the same put from Go, the floor of the step's cost.
//
//	go test -run '^$' -bench StepStoragePut -benchtime 2s .
func BenchmarkStepStoragePut(b *testing.B) {
	p := storageTestPlatform(b)
	dir := b.TempDir()
	writeFile(b, dir, "workflows/put.workflow.ts", `import { storage } from "svc";
const body = "x".repeat(100);
async function put(i: number) { "use step"; return (await storage.put("bench/" + (i % 100), body)).size; }
export default async function w() { "use workflow"; return put(0); }`)
	m, err := bundleModule(dir, "workflows/put.workflow.ts")
	if err != nil {
		b.Fatal(err)
	}
	def := newWorkflowDef("put", "workflows/put.workflow.ts")
	def.Module = m
	runner := newStepRunner(func() map[string]string { return nil }, p, discardLogger())
	b.Run("step", func(b *testing.B) {
		for i := range b.N {
			out, finish, err := runner.start(def, "put", json.RawMessage(fmt.Sprintf("[%d]", i)), nil, otelUserTrace{})
			if err == nil && finish != nil {
				out, err = finish(context.Background())
			}
			if err != nil || string(out) != "100" {
				b.Fatalf("step = %s, %v", out, err)
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		c := p.storage.Load()
		body := bytes.Repeat([]byte("x"), 100)
		for i := range b.N {
			if _, err := c.put(context.Background(), fmt.Sprintf("bench/%d", i%100), body, "text/plain"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
