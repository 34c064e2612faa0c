/**
 * Stateful cell round trip on the local provider: `executeCode("x + 1", {context})` in a warm
 * Python context, against a stateless `executeCode("print(x + 1)")` (a fresh interpreter per
 * call, today's path) measured in the same run, in the same sandbox, the two interleaved call by
 * call (which goes first alternates) so drift hits both alike. Each call is timed from the SDK
 * call to its resolved result. Goal: stateful p50 <= 5 ms.
 * Prints a Markdown table on stdout (progress on stderr) and writes bench/results/contexts.json.
 *
 *   node bench/src/contexts.ts        (from the repository root)
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalProvider } from "@sandpit/sdk";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { percentile } from "./stats.ts";

const WARMUP = 30;
const RUNS = 300;
const GOAL_P50_MS = 5;
const RESULTS_FILE = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "results",
  "contexts.json",
);

interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

const pct = (samples: number[]): Percentiles => {
  const s = [...samples].sort((a, b) => a - b);
  const r = (v: number) => Math.round(v * 100) / 100;
  return { p50: r(percentile(s, 50)), p95: r(percentile(s, 95)), p99: r(percentile(s, 99)) };
};

async function measure(isolation: "none" | "bwrap") {
  const baseDir = await mkdtemp(join(os.tmpdir(), "sandpit-bench-ctx-"));
  const provider = new LocalProvider({ baseDir, isolation });
  try {
    const sbx = await provider.create({ language: "python" });
    const ctx = await sbx.createCodeContext({ language: "python" });
    await sbx.executeCode("x = 41", "python", { context: ctx });
    const stateful = async () => {
      const t = performance.now();
      const r = await sbx.executeCode("x + 1", "python", { context: ctx });
      const ms = performance.now() - t;
      if (r.results[0]?.text !== "42")
        throw new Error(`stateful cell answered ${r.results[0]?.text}`);
      return ms;
    };
    const stateless = async () => {
      const t = performance.now();
      const r = await sbx.executeCode("x = 41\nprint(x + 1)", "python");
      const ms = performance.now() - t;
      if (r.output !== 42) throw new Error(`stateless cell printed ${r.stdout}`);
      return ms;
    };
    for (let i = 0; i < WARMUP; i++) {
      await stateful();
      await stateless();
    }
    const ours: number[] = [];
    const floor: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      if (i % 2 === 0) {
        ours.push(await stateful());
        floor.push(await stateless());
      } else {
        floor.push(await stateless());
        ours.push(await stateful());
      }
      if (i % 50 === 0) process.stderr.write(`${isolation}: ${i}/${RUNS}\n`);
    }
    await sbx.kill();
    const s = pct(ours);
    const f = pct(floor);
    return {
      isolation,
      runs: RUNS,
      statefulMs: s,
      statelessMs: f,
      ratioP50: Math.round((s.p50 / f.p50) * 1000) / 1000,
      goalMet: s.p50 <= GOAL_P50_MS,
    };
  } finally {
    await provider.close();
    await rm(baseDir, { recursive: true, force: true });
  }
}

const modes: ("none" | "bwrap")[] = (await bwrapAvailable()) ? ["none", "bwrap"] : ["none"];
const results = [];
for (const mode of modes) results.push(await measure(mode));
await writeResults(RESULTS_FILE, {
  commit: commitMeasured(),
  date: new Date().toISOString(),
  host: hostInfo(),
  results,
});
const row = (p: Percentiles) => `${p.p50} / ${p.p95} / ${p.p99}`;
console.log(
  "| isolation | stateful `x + 1` p50 / p95 / p99 (ms) | stateless p50 / p95 / p99 (ms) | stateful / stateless (p50) | goal p50 ≤ 5 ms |",
);
console.log("|---|---|---|---|---|");
for (const r of results) {
  console.log(
    `| ${r.isolation} | ${row(r.statefulMs)} | ${row(r.statelessMs)} | ${r.ratioP50} | ${r.goalMet ? "met" : "missed"} |`,
  );
}
