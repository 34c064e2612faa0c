/**
 * Background processes on the local provider: background start → first output byte, i.e. from
 * `commands.run("echo ready", {background: true, onStdout})` being called until its first
 * `onStdout` call, against a floor measured in the same run on the same sandbox: the foreground
 * round trip of `commands.run("echo ready")` (spawn, output, exit, answer). The two are
 * interleaved (alternating which goes first) so drift hits both alike. For each isolation mode
 * bubblewrap allows here. Prints a Markdown table on stdout (progress on stderr) and writes
 * bench/results/processes.json.
 *
 *   node bench/src/processes.ts        (from the repository root)
 */
import * as fs from "node:fs/promises";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalProvider, type SandboxInstance } from "@sandpit/sdk";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { percentile } from "./stats.ts";

const WARMUP = 20;
const RUNS = 300;
const RESULTS_FILE = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "results",
  "processes.json",
);

interface Percentiles {
  n: number;
  p50: number;
  p95: number;
  p99: number;
}

const now = () => performance.now();
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

function percentiles(samples: number[]): Percentiles {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
  };
}

/** Time from the call until the first output byte reaches `onStdout`; the process is awaited after. */
async function backgroundFirstByte(sbx: SandboxInstance): Promise<number> {
  let first!: () => void;
  const arrived = new Promise<void>((resolve) => (first = resolve));
  const t = now();
  const h = await sbx.commands.run("echo ready", { background: true, onStdout: () => first() });
  await arrived;
  const ms = now() - t;
  const r = await h.wait();
  if (r.exitCode !== 0 || r.stdout !== "ready\n")
    throw new Error(`unexpected result ${JSON.stringify(r)}`);
  return ms;
}

async function foregroundEcho(sbx: SandboxInstance): Promise<number> {
  const t = now();
  const r = await sbx.commands.run("echo ready");
  const ms = now() - t;
  if (r.exitCode !== 0 || r.stdout !== "ready\n")
    throw new Error(`unexpected result ${JSON.stringify(r)}`);
  return ms;
}

async function benchMode(isolation: "none" | "bwrap") {
  const baseDir = await fs.mkdtemp(join(os.tmpdir(), `sandpit-bench-proc-${isolation}-`));
  const provider = new LocalProvider({ baseDir, isolation });
  try {
    const sbx = await provider.create({ language: "python" });
    const background: number[] = [];
    const floor: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const order =
        i % 2 ? [backgroundFirstByte, foregroundEcho] : [foregroundEcho, backgroundFirstByte];
      for (const measure of order) {
        const ms = await measure(sbx);
        if (i >= WARMUP) (measure === foregroundEcho ? floor : background).push(ms);
      }
    }
    const left = (await sbx.commands.list()).filter((p) => p.exitCode === undefined);
    if (left.length) throw new Error(`${left.length} background processes still run`);
    await sbx.kill();
    const b = percentiles(background);
    const f = percentiles(floor);
    log(`${isolation}: first byte p50 ${b.p50.toFixed(2)} ms, floor p50 ${f.p50.toFixed(2)} ms`);
    return { isolation, backgroundFirstByteMs: b, foregroundEchoMs: f, ratioP50: b.p50 / f.p50 };
  } finally {
    await provider.close();
    await fs.rm(baseDir, { recursive: true, force: true });
  }
}

const started = new Date();
const modes: ("none" | "bwrap")[] = (await bwrapAvailable()) ? ["none", "bwrap"] : ["none"];
const results = [];
for (const mode of modes) results.push(await benchMode(mode));

const fmt = (p: Percentiles) => `${p.p50.toFixed(2)} / ${p.p95.toFixed(2)} / ${p.p99.toFixed(2)}`;
const head = results.map((r) => `isolation: "${r.isolation}"`);
const rows = [
  [
    `background start → first output byte, p50 / p95 / p99 (ms, N=${RUNS})`,
    ...results.map((r) => fmt(r.backgroundFirstByteMs)),
  ],
  [
    `floor: foreground \`echo ready\` round trip, p50 / p95 / p99 (ms, N=${RUNS})`,
    ...results.map((r) => fmt(r.foregroundEchoMs)),
  ],
  ["first byte / floor, p50", ...results.map((r) => `${r.ratioP50.toFixed(2)}x`)],
];
process.stdout.write(
  [
    `| Metric | ${head.join(" | ")} |`,
    `| --- | ${head.map(() => "---:").join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n") + "\n",
);
await writeResults(RESULTS_FILE, {
  benchmark: "processes",
  startedAt: started.toISOString(),
  commit: commitMeasured(),
  host: hostInfo(),
  warmup: WARMUP,
  results,
});
