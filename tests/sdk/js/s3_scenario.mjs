// The AWS SDK for JavaScript v3 against a Talon gateway's S3 front, with its defaults:
// PutObject (default CRC32 checksums), lib-storage's Upload (5 MiB parts, 4 in flight),
// parallel ranged GETs, and paginated listings. Arguments: a JSON file naming the
// endpoint, credentials, bucket and local files; prints one JSON report on stdout.
import { readFileSync, writeFileSync, openSync, writeSync, closeSync } from "node:fs";
import {
  S3Client, PutObjectCommand, GetObjectCommand, HeadObjectCommand, paginateListObjectsV2,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const s3 = new S3Client({
  endpoint: job.endpoint,
  region: job.region,
  forcePathStyle: true,
  credentials: { accessKeyId: job.accessKey, secretAccessKey: job.secretKey },
});
const bytes = async (body) => Buffer.from(await body.transformToByteArray());
const report = { etags: {} };

// A small object through PutObject.
const small = readFileSync(job.small);
report.etags.small = (await s3.send(new PutObjectCommand({
  Bucket: job.bucket, Key: "js/small.bin", Body: small, ContentType: "application/x-js",
  Metadata: { who: "aws-sdk-js" },
}))).ETag;

// A large one through lib-storage's Upload, with its defaults.
const upload = new Upload({
  client: s3,
  params: { Bucket: job.bucket, Key: "js/dir/big.bin", Body: readFileSync(job.big) },
});
report.etags.big = (await upload.done()).ETag;

// Parallel ranged GETs of the large one, 4 in flight, into a file.
const head = await s3.send(new HeadObjectCommand({ Bucket: job.bucket, Key: "js/dir/big.bin" }));
report.size = head.ContentLength;
report.headEtag = head.ETag;
const piece = 3 * 1024 * 1024 + 17;
const ranges = [];
for (let start = 0; start < head.ContentLength; start += piece) {
  ranges.push([start, Math.min(start + piece, head.ContentLength) - 1]);
}
const out = openSync(job.download, "w");
for (let i = 0; i < ranges.length; i += 4) {
  const batch = ranges.slice(i, i + 4);
  const got = await Promise.all(batch.map(async ([a, b]) => {
    const r = await s3.send(new GetObjectCommand({
      Bucket: job.bucket, Key: "js/dir/big.bin", Range: `bytes=${a}-${b}`, IfMatch: head.ETag,
    }));
    return [a, await bytes(r.Body)];
  }));
  for (const [a, buf] of got) writeSync(out, buf, 0, buf.length, a);
}
closeSync(out);

// The small one whole, with what was written about it.
const got = await s3.send(new GetObjectCommand({ Bucket: job.bucket, Key: "js/small.bin" }));
writeFileSync(job.smallDownload, await bytes(got.Body));
report.small = { contentType: got.ContentType, metadata: got.Metadata, etag: got.ETag };

// Listings: everything in pages of one, and a folder with its delimiter.
report.listed = [];
for await (const page of paginateListObjectsV2({ client: s3, pageSize: 1 }, { Bucket: job.bucket, Prefix: "js/" })) {
  for (const o of page.Contents ?? []) report.listed.push([o.Key, o.Size]);
}
report.top = [];
for await (const page of paginateListObjectsV2({ client: s3 }, { Bucket: job.bucket, Prefix: "js/", Delimiter: "/" })) {
  for (const p of page.CommonPrefixes ?? []) report.top.push(p.Prefix);
  for (const o of page.Contents ?? []) report.top.push(o.Key);
}
console.log(JSON.stringify(report));
