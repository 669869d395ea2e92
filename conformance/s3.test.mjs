// Conformance of svc's built-in object storage with the official AWS SDK for JavaScript v3.
// Run by TestS3Conformance (conformance_test.go) with S3_ENDPOINT, S3_ACCESS_KEY_ID,
// S3_SECRET_ACCESS_KEY and S3_BUCKET pointing at a running server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} must be set`);
  return value;
}

const endpoint = env("S3_ENDPOINT");
const accessKeyId = env("S3_ACCESS_KEY_ID");
const secretAccessKey = env("S3_SECRET_ACCESS_KEY");
const Bucket = env("S3_BUCKET");

function client(secret = secretAccessKey) {
  return new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId, secretAccessKey: secret },
    maxAttempts: 1,
  });
}

const s3 = client();
const sha256 = (data) => createHash("sha256").update(data).digest("hex");
const md5 = (data) => createHash("md5").update(data).digest("hex");

test("buckets: create, list, head, delete", async () => {
  const extra = `${Bucket}-extra`;
  await s3.send(new CreateBucketCommand({ Bucket: extra }));
  const { Buckets } = await s3.send(new ListBucketsCommand({}));
  const names = Buckets.map((b) => b.Name);
  assert.ok(names.includes(Bucket) && names.includes(extra), `buckets ${names}`);
  assert.ok(Buckets.every((b) => b.CreationDate instanceof Date));
  await s3.send(new HeadBucketCommand({ Bucket: extra }));
  await assert.rejects(s3.send(new CreateBucketCommand({ Bucket: extra })), { name: "BucketAlreadyOwnedByYou" });
  await s3.send(new PutObjectCommand({ Bucket: extra, Key: "x", Body: "x" }));
  await assert.rejects(s3.send(new DeleteBucketCommand({ Bucket: extra })), { name: "BucketNotEmpty" });
  await s3.send(new DeleteObjectCommand({ Bucket: extra, Key: "x" }));
  await s3.send(new DeleteBucketCommand({ Bucket: extra }));
  await assert.rejects(s3.send(new HeadBucketCommand({ Bucket: extra })), (err) => err.$metadata?.httpStatusCode === 404);
});

test("objects: put, get with range, head, delete", async () => {
  const Key = "objects/hello wörld+1.txt";
  const put = await s3.send(
    new PutObjectCommand({ Bucket, Key, Body: "hello, svc storage", ContentType: "text/plain", Metadata: { owner: "ada" } }),
  );
  assert.equal(put.ETag, `"${md5("hello, svc storage")}"`);

  const got = await s3.send(new GetObjectCommand({ Bucket, Key }));
  assert.equal(await got.Body.transformToString(), "hello, svc storage");
  assert.equal(got.ContentType, "text/plain");
  assert.deepEqual(got.Metadata, { owner: "ada" });

  const part = await s3.send(new GetObjectCommand({ Bucket, Key, Range: "bytes=7-9" }));
  assert.equal(part.$metadata.httpStatusCode, 206);
  assert.equal(part.ContentRange, "bytes 7-9/18");
  assert.equal(await part.Body.transformToString(), "svc");
  const suffix = await s3.send(new GetObjectCommand({ Bucket, Key, Range: "bytes=-7" }));
  assert.equal(await suffix.Body.transformToString(), "storage");
  await assert.rejects(s3.send(new GetObjectCommand({ Bucket, Key, Range: "bytes=100-" })), { name: "InvalidRange" });

  const head = await s3.send(new HeadObjectCommand({ Bucket, Key }));
  assert.equal(head.ContentLength, 18);
  assert.equal(head.ETag, put.ETag);
  assert.ok(head.LastModified instanceof Date);

  await s3.send(new DeleteObjectCommand({ Bucket, Key }));
  await assert.rejects(s3.send(new GetObjectCommand({ Bucket, Key })), { name: "NoSuchKey" });
  await assert.rejects(s3.send(new HeadObjectCommand({ Bucket, Key })), { name: "NotFound" });
  await s3.send(new DeleteObjectCommand({ Bucket, Key })); // deleting a missing key succeeds
});

test("objects: streamed body (aws-chunked with a trailing checksum)", async () => {
  const chunks = [randomBytes(100_000), randomBytes(70_000), randomBytes(1)];
  const all = Buffer.concat(chunks);
  await s3.send(
    new PutObjectCommand({ Bucket, Key: "stream/blob", Body: Readable.from(chunks), ContentLength: all.length }),
  );
  const got = await s3.send(new GetObjectCommand({ Bucket, Key: "stream/blob" }));
  assert.equal(sha256(Buffer.from(await got.Body.transformToByteArray())), sha256(all));
});

test("objects: copy and batch delete", async () => {
  await s3.send(new PutObjectCommand({ Bucket, Key: "copy/src", Body: "original", ContentType: "text/x-src" }));
  const copied = await s3.send(new CopyObjectCommand({ Bucket, Key: "copy/dst", CopySource: `${Bucket}/copy/src` }));
  assert.equal(copied.CopyObjectResult.ETag, `"${md5("original")}"`);
  const dst = await s3.send(new GetObjectCommand({ Bucket, Key: "copy/dst" }));
  assert.equal(await dst.Body.transformToString(), "original");
  assert.equal(dst.ContentType, "text/x-src");

  const res = await s3.send(
    new DeleteObjectsCommand({ Bucket, Delete: { Objects: [{ Key: "copy/src" }, { Key: "copy/dst" }] } }),
  );
  assert.deepEqual(res.Deleted.map((d) => d.Key).sort(), ["copy/dst", "copy/src"]);
  const left = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: "copy/" }));
  assert.equal(left.KeyCount, 0);
});

test("ListObjectsV2: prefix, delimiter and continuation with small pages", async () => {
  const keys = ["list/a.txt", "list/b/1", "list/b/2", "list/c/1", "list/d.txt", "list/e/x/y", "list/f.txt"];
  for (const Key of keys) await s3.send(new PutObjectCommand({ Bucket, Key, Body: Key }));

  const items = [];
  let ContinuationToken;
  for (let page = 0; page < 20; page++) {
    const res = await s3.send(
      new ListObjectsV2Command({ Bucket, Prefix: "list/", Delimiter: "/", MaxKeys: 2, ContinuationToken }),
    );
    assert.ok(res.KeyCount <= 2);
    const pageItems = [...(res.Contents ?? []).map((c) => c.Key), ...(res.CommonPrefixes ?? []).map((p) => p.Prefix)];
    assert.equal(res.KeyCount, pageItems.length);
    items.push(...pageItems.sort());
    if (!res.IsTruncated) break;
    assert.ok(res.NextContinuationToken);
    ContinuationToken = res.NextContinuationToken;
  }
  assert.deepEqual(items, ["list/a.txt", "list/b/", "list/c/", "list/d.txt", "list/e/", "list/f.txt"]);

  const flat = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: "list/b/" }));
  assert.deepEqual(
    flat.Contents.map((c) => [c.Key, c.Size]),
    [["list/b/1", 8], ["list/b/2", 8]],
  );
  const after = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: "list/", StartAfter: "list/d.txt" }));
  assert.deepEqual(after.Contents.map((c) => c.Key), ["list/e/x/y", "list/f.txt"]);
});

test("multipart upload: create, upload parts, list parts, complete", async () => {
  const Key = "multipart/big.bin";
  const parts = [randomBytes(5 * 1024 * 1024 + 3), randomBytes(5 * 1024 * 1024), randomBytes(1234)];
  const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key, ContentType: "application/x-big" }));
  assert.ok(UploadId);
  const done = [];
  for (const [i, Body] of parts.entries()) {
    const { ETag } = await s3.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber: i + 1, Body }));
    assert.equal(ETag, `"${md5(Body)}"`);
    done.push({ ETag, PartNumber: i + 1 });
  }
  const listed = await s3.send(new ListPartsCommand({ Bucket, Key, UploadId }));
  assert.deepEqual(
    listed.Parts.map((p) => [p.PartNumber, p.Size]),
    parts.map((p, i) => [i + 1, p.length]),
  );
  const result = await s3.send(
    new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: done } }),
  );
  const partMD5s = Buffer.concat(parts.map((p) => createHash("md5").update(p).digest()));
  assert.equal(result.ETag, `"${md5(partMD5s)}-3"`);

  const all = Buffer.concat(parts);
  const got = await s3.send(new GetObjectCommand({ Bucket, Key }));
  assert.equal(got.ContentType, "application/x-big");
  assert.equal(sha256(Buffer.from(await got.Body.transformToByteArray())), sha256(all));

  const aborted = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key: "multipart/aborted" }));
  await s3.send(new AbortMultipartUploadCommand({ Bucket, Key: "multipart/aborted", UploadId: aborted.UploadId }));
  await assert.rejects(
    s3.send(new ListPartsCommand({ Bucket, Key: "multipart/aborted", UploadId: aborted.UploadId })),
    { name: "NoSuchUpload" },
  );
});

test("ListMultipartUploads: prefix, delimiter, paging, and gone once aborted", async () => {
  const keys = ["uploads/a/1", "uploads/a/2", "uploads/b"];
  const ids = {};
  for (const Key of keys) ids[Key] = (await s3.send(new CreateMultipartUploadCommand({ Bucket, Key }))).UploadId;

  const all = await s3.send(new ListMultipartUploadsCommand({ Bucket, Prefix: "uploads/" }));
  assert.deepEqual(
    all.Uploads.map((u) => [u.Key, u.UploadId]),
    keys.map((k) => [k, ids[k]]),
  );
  assert.ok(all.Uploads.every((u) => u.Initiated instanceof Date));
  assert.equal(all.IsTruncated, false);

  const rolled = await s3.send(new ListMultipartUploadsCommand({ Bucket, Prefix: "uploads/", Delimiter: "/" }));
  assert.deepEqual(rolled.Uploads.map((u) => u.Key), ["uploads/b"]);
  assert.deepEqual(rolled.CommonPrefixes.map((p) => p.Prefix), ["uploads/a/"]);

  const paged = [];
  let KeyMarker, UploadIdMarker;
  for (let page = 0; page < 10; page++) {
    const res = await s3.send(
      new ListMultipartUploadsCommand({ Bucket, Prefix: "uploads/", MaxUploads: 1, KeyMarker, UploadIdMarker }),
    );
    assert.equal(res.MaxUploads, 1);
    paged.push(...(res.Uploads ?? []).map((u) => u.UploadId));
    if (!res.IsTruncated) break;
    ({ NextKeyMarker: KeyMarker, NextUploadIdMarker: UploadIdMarker } = res);
  }
  assert.deepEqual(paged, keys.map((k) => ids[k]));

  for (const Key of keys) await s3.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId: ids[Key] }));
  const after = await s3.send(new ListMultipartUploadsCommand({ Bucket, Prefix: "uploads/" }));
  assert.equal((after.Uploads ?? []).length, 0);
});

test("GetBucketVersioning: the bucket is unversioned", async () => {
  const res = await s3.send(new GetBucketVersioningCommand({ Bucket }));
  assert.equal(res.$metadata.httpStatusCode, 200);
  assert.equal(res.Status, undefined);
});

test("presigned GET fetched with fetch()", async () => {
  const Key = "presigned/report.txt";
  await s3.send(new PutObjectCommand({ Bucket, Key, Body: "for your eyes only" }));
  const url = await getSignedUrl(s3, new GetObjectCommand({ Bucket, Key }), { expiresIn: 60 });
  assert.match(url, /X-Amz-Signature=/);
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "for your eyes only");

  const tampered = await fetch(url.replace("report.txt", "other.txt"));
  assert.equal(tampered.status, 403);
  assert.match(await tampered.text(), /<Code>SignatureDoesNotMatch<\/Code>/);
});

test("a wrong secret is rejected", async () => {
  const wrong = client("definitely-not-the-secret");
  await assert.rejects(wrong.send(new ListObjectsV2Command({ Bucket })), { name: "SignatureDoesNotMatch" });
  await assert.rejects(wrong.send(new PutObjectCommand({ Bucket, Key: "nope", Body: "x" })), {
    name: "SignatureDoesNotMatch",
  });
  await assert.rejects(s3.send(new HeadObjectCommand({ Bucket, Key: "nope" })), { name: "NotFound" });
});
