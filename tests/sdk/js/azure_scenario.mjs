// @azure/storage-blob against a Talon gateway's Azure front, with its defaults:
// uploadData (one Put Blob), uploadStream (blocks of 8 MiB, 5 in flight, then Put Block
// List), downloadToBuffer (parallel ranged reads), and listings flat and by folder, in
// pages. Arguments: a JSON file naming the connection string, container and local files;
// prints one JSON report on stdout.
import { createReadStream, readFileSync, writeFileSync } from "node:fs";
import { BlobServiceClient } from "@azure/storage-blob";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const service = BlobServiceClient.fromConnectionString(job.connectionString);
const container = service.getContainerClient(job.container);
const report = { etags: {} };

const small = container.getBlockBlobClient("js/small.bin");
report.etags.small = (await small.uploadData(readFileSync(job.small), {
  blobHTTPHeaders: { blobContentType: "application/x-js" }, metadata: { who: "azure-sdk-js" },
})).etag;

const big = container.getBlockBlobClient("js/dir/big.bin");
report.etags.big = (await big.uploadStream(createReadStream(job.big))).etag;
const committed = await big.getBlockList("committed");
report.blocks = committed.committedBlocks.length;

const props = await big.getProperties();
report.size = props.contentLength;
const buf = await big.downloadToBuffer(0, undefined, { blockSize: 3 * 1024 * 1024 + 17, concurrency: 4 });
writeFileSync(job.download, buf);

writeFileSync(job.smallDownload, await small.downloadToBuffer());
const sp = await small.getProperties();
report.small = { contentType: sp.contentType, metadata: sp.metadata, etag: sp.etag };

report.listed = [];
for await (const page of container.listBlobsFlat({ prefix: "js/" }).byPage({ maxPageSize: 1 })) {
  for (const b of page.segment.blobItems) report.listed.push([b.name, b.properties.contentLength]);
}
report.top = [];
for await (const item of container.listBlobsByHierarchy("/", { prefix: "js/" })) {
  report.top.push(item.name);
}
console.log(JSON.stringify(report));
