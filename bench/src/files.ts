/**
 * Streamed-transfer benchmark on the local provider: a 1 GiB file written with
 * `filesystem.writeStream` from a generator and read back with `filesystem.readStream`, against
 * plain fs streams (createWriteStream fed by the same generator, createReadStream) on the same
 * disk, in the same run, interleaved run by run (which side goes first alternates). A third side,
 * curl moving the same bytes over the same socket to the same sandboxd routes, shows what the
 * HTTP hop itself allows with no JavaScript on the client. The client's peak RSS growth is
 * reported too: a streamed transfer must not hold the file.
 * Prints a Markdown table on stdout (progress on stderr) and writes bench/results/files.json.
 *
 *   node bench/src/files.ts        (from the repository root)
 */
import { createReadStream, createWriteStream } from "node:fs";
import * as fs from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { LocalProvider, sandboxdConnection } from "@sandpit/sdk";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { summarize, type Summary } from "./stats.ts";

const MiB = 1024 * 1024;
const SIZE = 1024 * MiB;
const CHUNK = MiB;
const RUNS = 5;
const GOAL_RATIO = 0.7;
const SANDBOX_FILE = "/mnt/user-data/workspace/bench-stream.bin";
const RESULTS_FILE = join(dirname(fileURLToPath(import.meta.url)), "..", "results", "files.json");

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const now = () => performance.now();

/** 16 distinct chunks, cycled: generating content must cost both sides the same (nothing). */
const CHUNKS = Array.from({ length: 16 }, (_, i) => Buffer.alloc(CHUNK, i * 13 + 1));
async function* content(): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < SIZE / CHUNK; i++) yield CHUNKS[i % CHUNKS.length]!;
}

async function drain(stream: AsyncIterable<Uint8Array>): Promise<number> {
  let n = 0;
  for await (const chunk of stream) n += chunk.byteLength;
  return n;
}

let peakRss = 0;
const baseRss = process.memoryUsage().rss;
const sampler = setInterval(
  () => (peakRss = Math.max(peakRss, process.memoryUsage().rss - baseRss)),
  20,
);

interface Side {
  writeMs: number[];
  readMs: number[];
}

const run = promisify(execFile);

async function main() {
  const baseDir = await fs.mkdtemp(join(tmpdir(), "sandpit-bench-files-"));
  const plainDir = await fs.mkdtemp(join(tmpdir(), "sandpit-bench-plain-"));
  const plainFile = join(plainDir, "plain.bin");
  const provider = new LocalProvider({ baseDir, isolation: "none" });
  const started = Date.now();
  try {
    const sbx = await provider.create({ language: "python" });
    const ours: Side = { writeMs: [], readMs: [] };
    const plain: Side = { writeMs: [], readMs: [] };
    // The transport's own floor: curl (no JavaScript on the client side) moving the same bytes
    // over the same socket to the same sandboxd routes, from and to the page cache.
    const http: Side = { writeMs: [], readMs: [] };
    const conn = await sandboxdConnection(sbx);
    const source = join(plainDir, "source.bin");
    await pipeline(Readable.from(content(), { objectMode: false }), createWriteStream(source));
    const curl = (...args: string[]) =>
      run("curl", [
        "-sSf",
        ...(conn.socketPath ? ["--unix-socket", conn.socketPath] : []),
        "-H",
        `authorization: Bearer ${conn.token}`,
        ...args,
      ]);
    const url = `${conn.socketPath ? "http://sandboxd" : conn.baseUrl}/v1/files?path=${encodeURIComponent(SANDBOX_FILE)}`;
    const runCurl = async () => {
      let t = now();
      await curl(
        "-X",
        "PUT",
        "-H",
        "content-type: application/octet-stream",
        "-T",
        source,
        url,
        "-o",
        "/dev/null",
      );
      http.writeMs.push(now() - t);
      t = now();
      await curl(url, "-o", "/dev/null");
      http.readMs.push(now() - t);
      await sbx.filesystem.remove(SANDBOX_FILE);
    };
    const runOurs = async () => {
      let t = now();
      await sbx.filesystem.writeStream(SANDBOX_FILE, content());
      ours.writeMs.push(now() - t);
      t = now();
      const n = await drain(await sbx.filesystem.readStream(SANDBOX_FILE));
      ours.readMs.push(now() - t);
      if (n !== SIZE) throw new Error(`read ${n} bytes back, expected ${SIZE}`);
      await sbx.filesystem.remove(SANDBOX_FILE);
    };
    const runPlain = async () => {
      let t = now();
      await pipeline(
        Readable.from(content(), { objectMode: false }),
        createWriteStream(plainFile, { highWaterMark: MiB }),
      );
      plain.writeMs.push(now() - t);
      t = now();
      const n = await drain(createReadStream(plainFile, { highWaterMark: MiB }));
      plain.readMs.push(now() - t);
      if (n !== SIZE) throw new Error(`plain read ${n} bytes, expected ${SIZE}`);
      await fs.rm(plainFile);
    };
    // One unrecorded round each: first-use costs (allocations, JIT, a cold page cache).
    await runOurs();
    await runPlain();
    await runCurl();
    for (const side of [ours, plain, http]) side.writeMs.length = side.readMs.length = 0;
    peakRss = 0;
    for (let i = 0; i < RUNS; i++) {
      log(`run ${i + 1}/${RUNS}`);
      if (i % 2 === 0) {
        await runOurs();
        await runPlain();
      } else {
        await runPlain();
        await runOurs();
      }
      await runCurl();
    }
    await sbx.kill();
    report(ours, plain, http, Date.now() - started);
  } finally {
    clearInterval(sampler);
    await provider.close();
    await fs.rm(baseDir, { recursive: true, force: true });
    await fs.rm(plainDir, { recursive: true, force: true });
  }
}

const mbps = (ms: number) => SIZE / 1e6 / (ms / 1000);

function report(ours: Side, plain: Side, http: Side, elapsedMs: number) {
  const s = (xs: number[]): Summary => summarize(xs);
  const total = (side: Side) => side.writeMs.map((w, i) => w + side.readMs[i]!);
  const rows = {
    write: { ours: s(ours.writeMs), plain: s(plain.writeMs), http: s(http.writeMs) },
    read: { ours: s(ours.readMs), plain: s(plain.readMs), http: s(http.readMs) },
    total: { ours: s(total(ours)), plain: s(total(plain)), http: s(total(http)) },
  };
  // Throughput ratio at the medians: plain time / our time.
  const ratio = (k: keyof typeof rows) => rows[k].plain.p50 / rows[k].ours.p50;
  const record = {
    when: new Date().toISOString(),
    commit: commitMeasured(),
    host: hostInfo(),
    bytes: SIZE,
    chunkBytes: CHUNK,
    runs: RUNS,
    elapsedMs,
    ms: rows,
    ratio: { write: ratio("write"), read: ratio("read"), total: ratio("total") },
    // What the HTTP hop alone allows: curl over the same socket against plain fs.
    httpFloorRatio: {
      write: rows.write.plain.p50 / rows.write.http.p50,
      read: rows.read.plain.p50 / rows.read.http.p50,
      total: rows.total.plain.p50 / rows.total.http.p50,
    },
    peakClientRssGrowthBytes: peakRss,
    goalRatio: GOAL_RATIO,
  };
  void writeResults(RESULTS_FILE, record);
  const line = (label: string, k: keyof typeof rows) => {
    const o = rows[k].ours;
    const p = rows[k].plain;
    const h = rows[k].http;
    const r = ratio(k);
    const cell = (x: Summary) =>
      `${x.p50.toFixed(0)} / ${x.max.toFixed(0)} (${mbps(k === "total" ? x.p50 / 2 : x.p50).toFixed(0)} MB/s)`;
    return `| ${label} | ${cell(o)} | ${cell(p)} | ${cell(h)} | ${r.toFixed(2)}x${k === "total" ? (r >= GOAL_RATIO ? " (met)" : " (**missed**)") : ""} | ${(p.p50 / h.p50).toFixed(2)}x |`;
  };
  console.log(
    `| 1 GiB, ${CHUNK / MiB} MiB chunks, N=${RUNS} | SDK stream, p50 / max (ms) | plain fs stream, p50 / max (ms) | curl, same socket, p50 / max (ms) | SDK / plain | curl / plain |`,
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  console.log(line("writeStream", "write"));
  console.log(line("readStream", "read"));
  console.log(line("write + read", "total"));
  console.log(
    `\nClient peak RSS growth during the measured runs: ${(peakRss / MiB).toFixed(0)} MiB.`,
  );
}

await main();
