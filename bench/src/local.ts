/**
 * Local-provider benchmark: for each isolation mode ("none", "bwrap"), in one run and one process:
 *  1. create -> first command done: provider.create() until commands.run("true") resolves, on
 *     fresh threads (each sandbox killed after): cold (warm pool off, a sandboxd start each) and
 *     from the warm pool (one ready process, refilled untimed before each create), the latter
 *     against the same-run floor of commands.run("true") on a sandbox that is already running
 *     (a direct request to a running sandboxd over its open connection), interleaved;
 *  2. the round trip of commands.run("true") on one warm sandbox, against the floor measured
 *     alongside it: child_process.spawn("true") awaited until 'close';
 *  3. file throughput: filesystem.write + filesystem.readBytes of a 1 MiB and a 100 MiB buffer
 *     (bytes verified), against fs.promises.writeFile + readFile of the same buffer.
 * Ours and the baseline are interleaved (alternating which goes first) so drift hits both alike;
 * sections 1-2 run for every mode before any section 3, whose big buffers would inflate this
 * process's memory and with it the cost of fork() behind every spawn. For reference, the floor is
 * also measured from a fresh bare `node` child.
 * Prints a Markdown table on stdout (progress on stderr) and writes bench/results/local.json.
 *
 *   node bench/src/local.ts        (from the repository root; also `npm run bench`)
 */
import { execFile, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { LocalProvider, type SandboxInstance } from "@sandpit/sdk";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { median, percentile, summarize, type Summary } from "./stats.ts";

type Mode = "none" | "bwrap";
const MODES: Mode[] = ["none", "bwrap"];
const CREATE_RUNS = 20;
const WARM_RUNS = 30;
/** Issue 17: a local create from the warm pool reaches its first command in 10 ms (p50). */
const GOAL_WARM_CREATE_P50_MS = 10;
/** Issue 17: 100 MiB write+read through the SDK at ≥ 0.7 of plain fs. */
const GOAL_FILE_HEADLINE_RATIO = 0.7;
const RTT_WARMUP = 30;
const RTT_RUNS = 300;
const MiB = 1024 * 1024;
const FILE_CASES = [
  { label: "1 MiB", bytes: 1 * MiB, runs: 50 },
  { label: "100 MiB", bytes: 100 * MiB, runs: 5 },
] as const;
const SANDBOX_FILE = "/mnt/user-data/workspace/bench.bin";
const GOAL_RTT_RATIO = 3;
const GOAL_FILE_RATIO = 0.5;
const RESULTS_FILE = join(dirname(fileURLToPath(import.meta.url)), "..", "results", "local.json");

interface FileResult {
  label: string;
  bytes: number;
  runs: number;
  /** Medians (ms) of write+read, and of each half, per side. */
  ours: { totalMs: number; writeMs: number; readMs: number; mbPerS: number };
  plain: { totalMs: number; writeMs: number; readMs: number; mbPerS: number };
  /** ours.mbPerS / plain.mbPerS */
  ratio: number;
}

interface ModeResult {
  mode: Mode;
  /** The first create of a fresh provider (isolation probe, interpreter discovery): not among the timed runs. */
  coldCreateToFirstCommandMs: number;
  createToFirstCommandMs: Summary;
  /** create() alone, the same runs. */
  createOnlyMs: Summary;
  /** From the warm pool: create() until the first commands.run("true") resolves. */
  warmCreateToFirstCommandMs: Summary;
  warmCreateP95Ms: number;
  warmCreateOnlyMs: Summary;
  /** Same-run floor of the warm create: run("true") on an already running sandbox. */
  warmFloorMs: Summary;
  warmFloorP95Ms: number;
  roundTripMs: Summary;
  floorSpawnMs: Summary;
  /** roundTripMs.p50 / floorSpawnMs.p50 */
  roundTripRatioP50: number;
  /** This process's resident memory when the floor was measured (spawn cost grows with it). */
  benchRssBytesAtFloor: number;
  /** Reference only: the same floor measured by a fresh, bare `node` child (small RSS). */
  cleanFloorSpawnMs: Summary;
  cleanFloorRssBytes: number;
  /** roundTripMs.p50 / cleanFloorSpawnMs.p50 */
  roundTripRatioCleanP50: number;
  files: FileResult[];
}

const now = () => performance.now();
const p95 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    95,
  );
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

function bwrapUsable(): { ok: boolean; version: string | null; why?: string } {
  const version = spawnSync("bwrap", ["--version"], { encoding: "utf8" });
  if (version.error || version.status !== 0)
    return { ok: false, version: null, why: "bwrap is not installed" };
  const probe = spawnSync("bwrap", ["--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"], {
    stdio: "ignore",
    timeout: 10_000,
  });
  const v = version.stdout.trim();
  if (probe.status !== 0)
    return { ok: false, version: v, why: "bwrap cannot create namespaces here" };
  return { ok: true, version: v };
}

/** The floor: what spawning the same program costs with nothing in between. */
function spawnTrue(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("true", [], { stdio: "ignore" });
    child.once("error", reject);
    child.once("close", (code) =>
      code === 0 ? resolve() : reject(new Error(`true exited with ${code}`)),
    );
  });
}

/**
 * The floor once more, from a fresh `node -e` child with nothing loaded: libuv spawns with
 * fork(), whose cost grows with the parent's resident memory, and this process carries the SDK.
 */
const CLEAN_FLOOR_SCRIPT = `
const { spawn } = require("node:child_process");
const one = () => new Promise((resolve, reject) => {
  const child = spawn("true", [], { stdio: "ignore" });
  child.once("error", reject);
  child.once("close", (code) => (code === 0 ? resolve() : reject(new Error("true exited with " + code))));
});
(async () => {
  const samples = [];
  for (let i = 0; i < ${RTT_WARMUP + RTT_RUNS}; i++) {
    const t = performance.now();
    await one();
    if (i >= ${RTT_WARMUP}) samples.push(performance.now() - t);
  }
  process.stdout.write(JSON.stringify({ samples, rss: process.memoryUsage().rss }));
})().catch((err) => { console.error(err); process.exit(1); });
`;

async function cleanFloor(): Promise<{ ms: Summary; rssBytes: number }> {
  const { stdout } = await promisify(execFile)(process.execPath, ["-e", CLEAN_FLOOR_SCRIPT], {
    timeout: 60_000,
  });
  const { samples, rss } = JSON.parse(stdout) as { samples: number[]; rss: number };
  return { ms: summarize(samples), rssBytes: rss };
}

async function runTrue(sbx: SandboxInstance): Promise<void> {
  const r = await sbx.commands.run("true");
  if (r.exitCode !== 0)
    throw new Error(`"true" exited with ${r.exitCode} in ${sbx.sandboxId}: ${r.stderr}`);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);
}

/** MB (10^6 bytes) per second of bytes moved: `bytes` written plus `bytes` read. */
function mbPerS(bytes: number, ms: number): number {
  return (2 * bytes) / 1e6 / (ms / 1000);
}

/** A provider on a fresh temp dir, closed and cleaned up after `body`. */
async function withProvider<T>(
  mode: Mode,
  body: (provider: LocalProvider, baseDir: string) => Promise<T>,
  warm = 0,
): Promise<T> {
  const baseDir = await fs.mkdtemp(join(os.tmpdir(), `sandpit-bench-${mode}-`));
  const provider = new LocalProvider({ baseDir, isolation: mode, warm });
  try {
    return await body(provider, baseDir);
  } finally {
    await provider.close();
    await fs.rm(baseDir, { recursive: true, force: true });
  }
}

type Latency = Omit<ModeResult, "mode" | "files">;

/** Section 1, warm: create -> first command from a pool of one, against a running sandbox's round trip. */
function benchWarmCreate(mode: Mode) {
  return withProvider(
    mode,
    async (provider) => {
      const ref = await provider.create({ language: "python" });
      for (let i = 0; i < 5; i++) await runTrue(ref);
      const total: number[] = [];
      const createOnly: number[] = [];
      const floor: number[] = [];
      for (let i = 0; i < WARM_RUNS; i++) {
        await provider.fillWarmPool(); // untimed: one ready process
        if (provider.warmProcesses.length !== 1) throw new Error(`${mode}: the pool did not fill`);
        let t = now();
        await runTrue(ref);
        floor.push(now() - t);
        t = now();
        const sbx = await provider.create({ language: "python" });
        const t1 = now();
        await runTrue(sbx);
        total.push(now() - t);
        createOnly.push(t1 - t);
        await sbx.kill();
      }
      await ref.kill();
      log(`${mode}: ${WARM_RUNS} warm-pool creates done`);
      return {
        warmCreateToFirstCommandMs: summarize(total),
        warmCreateP95Ms: p95(total),
        warmCreateOnlyMs: summarize(createOnly),
        warmFloorMs: summarize(floor),
        warmFloorP95Ms: p95(floor),
      };
    },
    1,
  );
}

/** Sections 1 and 2: create -> first command, and the warm round trip against the spawn floor. */
async function benchLatency(mode: Mode): Promise<Latency> {
  const warm = await benchWarmCreate(mode);
  return withProvider(mode, async (provider) => {
    let t0 = now();
    const cold = await provider.create({ language: "python" });
    await runTrue(cold);
    const coldMs = now() - t0;
    await cold.kill();
    log(`${mode}: cold first create -> first command ${coldMs.toFixed(1)} ms`);

    const total: number[] = [];
    const createOnly: number[] = [];
    for (let i = 0; i < CREATE_RUNS; i++) {
      t0 = now();
      const sbx = await provider.create({ language: "python" });
      const t1 = now();
      await runTrue(sbx);
      const t2 = now();
      createOnly.push(t1 - t0);
      total.push(t2 - t0);
      await sbx.kill();
    }
    log(`${mode}: ${CREATE_RUNS} creates done`);

    const sbx = await provider.create({ language: "python" });
    const ours: number[] = [];
    const floor: number[] = [];
    const measureOurs = async (timed: boolean) => {
      const t = now();
      await runTrue(sbx);
      if (timed) ours.push(now() - t);
    };
    const measureFloor = async (timed: boolean) => {
      const t = now();
      await spawnTrue();
      if (timed) floor.push(now() - t);
    };
    for (let i = 0; i < RTT_WARMUP + RTT_RUNS; i++) {
      const timed = i >= RTT_WARMUP;
      if (i % 2 === 0) {
        await measureOurs(timed);
        await measureFloor(timed);
      } else {
        await measureFloor(timed);
        await measureOurs(timed);
      }
    }
    // fork() cost grows with the parent's resident memory, so the floor depends on ours: recorded.
    const benchRssBytes = process.memoryUsage().rss;
    const clean = await cleanFloor();
    await sbx.kill();
    log(`${mode}: ${RTT_RUNS} round trips done`);

    const roundTripMs = summarize(ours);
    const floorSpawnMs = summarize(floor);
    return {
      ...warm,
      coldCreateToFirstCommandMs: coldMs,
      createToFirstCommandMs: summarize(total),
      createOnlyMs: summarize(createOnly),
      roundTripMs,
      floorSpawnMs,
      roundTripRatioP50: roundTripMs.p50 / floorSpawnMs.p50,
      benchRssBytesAtFloor: benchRssBytes,
      cleanFloorSpawnMs: clean.ms,
      cleanFloorRssBytes: clean.rssBytes,
      roundTripRatioCleanP50: roundTripMs.p50 / clean.ms.p50,
    };
  });
}

/** Section 3: write + read through the sandbox against plain fs on the same filesystem. */
function benchFiles(mode: Mode): Promise<FileResult[]> {
  return withProvider(mode, async (provider, baseDir) => {
    const sbx = await provider.create({ language: "python" });
    const files: FileResult[] = [];
    const plainPath = join(baseDir, "plain.bin");
    for (const c of FILE_CASES) {
      const buf = randomBytes(c.bytes);
      const o = { w: [] as number[], r: [] as number[], t: [] as number[] };
      const p = { w: [] as number[], r: [] as number[], t: [] as number[] };
      const measureOurs = async () => {
        const ta = now();
        await sbx.filesystem.write(SANDBOX_FILE, buf);
        const tb = now();
        const back = await sbx.filesystem.readBytes(SANDBOX_FILE);
        const tc = now();
        if (!sameBytes(back, buf))
          throw new Error(
            `${mode}: ${c.label} read back through the sandbox differs from what was written`,
          );
        o.w.push(tb - ta);
        o.r.push(tc - tb);
        o.t.push(tc - ta);
      };
      const measurePlain = async () => {
        const ta = now();
        await fs.writeFile(plainPath, buf);
        const tb = now();
        const back = await fs.readFile(plainPath);
        const tc = now();
        if (!sameBytes(back, buf))
          throw new Error(`${mode}: ${c.label} read back from the plain file differs`);
        p.w.push(tb - ta);
        p.r.push(tc - tb);
        p.t.push(tc - ta);
      };
      for (let i = 0; i < c.runs; i++) {
        if (i % 2 === 0) {
          await measureOurs();
          await measurePlain();
        } else {
          await measurePlain();
          await measureOurs();
        }
      }
      const side = (s: typeof o) => {
        const totalMs = median(s.t);
        return {
          totalMs,
          writeMs: median(s.w),
          readMs: median(s.r),
          mbPerS: mbPerS(c.bytes, totalMs),
        };
      };
      const ourSide = side(o);
      const plainSide = side(p);
      files.push({
        label: c.label,
        bytes: c.bytes,
        runs: c.runs,
        ours: ourSide,
        plain: plainSide,
        ratio: ourSide.mbPerS / plainSide.mbPerS,
      });
      await fs.rm(plainPath, { force: true });
      log(`${mode}: ${c.label} x${c.runs} done`);
    }
    await sbx.kill();
    return files;
  });
}

const ms = (v: number, digits = 2) => v.toFixed(digits);
const verdict = (ok: boolean) => (ok ? "met" : "**missed**");

function table(results: ModeResult[], skipped: Partial<Record<Mode, string>>): string {
  const modes = MODES;
  const cell = (mode: Mode, f: (r: ModeResult) => string) => {
    const r = results.find((x) => x.mode === mode);
    return r ? f(r) : `skipped (${skipped[mode] ?? "not run"})`;
  };
  const row = (metric: string, f: (r: ModeResult) => string, goal = "") =>
    `| ${metric} | ${modes.map((m) => cell(m, f)).join(" | ")} | ${goal} |`;
  const file = (r: ModeResult, label: string) => r.files.find((f) => f.label === label)!;
  const lines = [
    `| Metric | ${modes.map((m) => `isolation: "${m}"`).join(" | ")} | Goal |`,
    `|---|${modes.map(() => "---:").join("|")}|---|`,
    row(
      `warm-pool create → first \`true\` done, p50 / p95 / p99 (ms, N=${WARM_RUNS})`,
      (r) =>
        `${ms(r.warmCreateToFirstCommandMs.p50)} / ${ms(r.warmCreateP95Ms)} / ${ms(r.warmCreateToFirstCommandMs.p99)} (${verdict(r.warmCreateToFirstCommandMs.p50 <= GOAL_WARM_CREATE_P50_MS)})`,
      `p50 ≤ ${GOAL_WARM_CREATE_P50_MS} ms`,
    ),
    row("… of which `create()` alone, p50 (ms)", (r) => ms(r.warmCreateOnlyMs.p50)),
    row(
      'floor: `run("true")` on an already running sandbox, same run, p50 / p95 / p99 (ms)',
      (r) => `${ms(r.warmFloorMs.p50)} / ${ms(r.warmFloorP95Ms)} / ${ms(r.warmFloorMs.p99)}`,
    ),
    row(
      "warm-pool create / floor, p50",
      (r) => `${(r.warmCreateToFirstCommandMs.p50 / r.warmFloorMs.p50).toFixed(2)}x`,
    ),
    row(
      `cold create (pool off) → first \`true\` done, p50 / p99 / mean (ms, N=${CREATE_RUNS})`,
      (r) =>
        `${ms(r.createToFirstCommandMs.p50, 1)} / ${ms(r.createToFirstCommandMs.p99, 1)} / ${ms(r.createToFirstCommandMs.mean, 1)}`,
    ),
    row("… of which `create()` alone, p50 (ms)", (r) => ms(r.createOnlyMs.p50, 1)),
    row("first create of a fresh provider (ms, N=1, not in the above)", (r) =>
      ms(r.coldCreateToFirstCommandMs, 1),
    ),
    row(
      `\`commands.run("true")\` round trip, p50 / p99 (ms, N=${RTT_RUNS})`,
      (r) => `${ms(r.roundTripMs.p50)} / ${ms(r.roundTripMs.p99)}`,
    ),
    row(
      `floor: \`spawn("true")\` until 'close', p50 / p99 (ms, N=${RTT_RUNS})`,
      (r) => `${ms(r.floorSpawnMs.p50)} / ${ms(r.floorSpawnMs.p99)}`,
    ),
    row("… this process's RSS while measuring the floor (MiB)", (r) =>
      (r.benchRssBytesAtFloor / MiB).toFixed(0),
    ),
    row(
      "round trip / floor, p50",
      (r) =>
        `${r.roundTripRatioP50.toFixed(2)}x (${verdict(r.roundTripRatioP50 <= GOAL_RTT_RATIO)})`,
      `≤ ${GOAL_RTT_RATIO}x`,
    ),
    row(
      "reference: floor from a fresh bare `node` child, p50 / p99 (ms, N=300)",
      (r) =>
        `${ms(r.cleanFloorSpawnMs.p50)} / ${ms(r.cleanFloorSpawnMs.p99)} (RSS ${(r.cleanFloorRssBytes / MiB).toFixed(0)} MiB)`,
    ),
    row(
      "reference: round trip / fresh-child floor, p50",
      (r) => `${r.roundTripRatioCleanP50.toFixed(2)}x`,
      "(not the goal's floor)",
    ),
  ];
  for (const c of FILE_CASES) {
    lines.push(
      row(`${c.label} write+read, sandbox MB/s (median of ${c.runs})`, (r) =>
        file(r, c.label).ours.mbPerS.toFixed(0),
      ),
      row(`${c.label} write+read, plain fs MB/s (median of ${c.runs})`, (r) =>
        file(r, c.label).plain.mbPerS.toFixed(0),
      ),
      row(
        `${c.label} sandbox / plain`,
        (r) =>
          `${file(r, c.label).ratio.toFixed(2)} (${verdict(file(r, c.label).ratio >= GOAL_FILE_RATIO)})`,
        `≥ ${GOAL_FILE_RATIO}`,
      ),
    );
  }
  return lines.join("\n");
}

/** Issue 17's rows for the headline table (`npm run bench`), one per isolation mode. */
function headline(results: ModeResult[]) {
  const unit = (v: number) => `${v.toFixed(2)} ms`;
  return results.flatMap((r) => {
    const w = r.warmCreateToFirstCommandMs;
    const fl = r.warmFloorMs;
    const big = r.files.find((x) => x.label === "100 MiB");
    return [
      {
        metric: `Local create → first command (warm pool; isolation: ${r.mode})`,
        value: `${unit(w.p50)} / ${unit(r.warmCreateP95Ms)} / ${unit(w.p99)} (p50 / p95 / p99)`,
        floor: `${unit(fl.p50)} / ${unit(r.warmFloorP95Ms)} / ${unit(fl.p99)}: run("true") on a running sandbox`,
        ratio: w.p50 / fl.p50,
        goal: `p50 ≤ ${GOAL_WARM_CREATE_P50_MS} ms`,
        met: w.p50 <= GOAL_WARM_CREATE_P50_MS,
      },
      ...(big
        ? [
            {
              metric: `100 MiB write+read through the SDK / plain fs (local; isolation: ${r.mode})`,
              value: `${big.ours.mbPerS.toFixed(0)} MB/s`,
              floor: `${big.plain.mbPerS.toFixed(0)} MB/s (fs.promises)`,
              ratio: big.ratio,
              goal: `≥ ${GOAL_FILE_HEADLINE_RATIO}`,
              met: big.ratio >= GOAL_FILE_HEADLINE_RATIO,
            },
          ]
        : []),
    ];
  });
}

async function main(): Promise<void> {
  const started = new Date();
  const bwrap = bwrapUsable();
  const results: ModeResult[] = [];
  const skipped: Partial<Record<Mode, string>> = {};
  const modes = MODES.filter((mode) => {
    if (mode !== "bwrap" || bwrap.ok) return true;
    skipped[mode] = bwrap.why ?? "bwrap unavailable";
    log(`skipping isolation "bwrap": ${skipped[mode]}`);
    return false;
  });
  // Latency first for every mode, files after: the 100 MiB buffers inflate this process's
  // resident memory, and with it the cost of fork(), i.e. of the spawn floor and of create.
  const latency = new Map<Mode, Latency>();
  for (const mode of modes) {
    log(`isolation "${mode}": latency`);
    latency.set(mode, await benchLatency(mode));
  }
  for (const mode of modes) {
    log(`isolation "${mode}": files`);
    results.push({ mode, ...latency.get(mode)!, files: await benchFiles(mode) });
  }
  const elapsedS = (Date.now() - started.getTime()) / 1000;

  const machine = {
    ...hostInfo(),
    bwrap: bwrap.version,
  };
  const commit = commitMeasured();
  const md = table(results, skipped);
  process.stdout.write(
    `## Local provider (${started.toISOString()})\n\n` +
      `Machine: ${machine.cpus} CPUs (${machine.cpuModel}), ${(machine.totalMemBytes / 2 ** 30).toFixed(1)} GiB RAM, ` +
      `Node ${machine.node}, ${machine.platform}, ${machine.bwrap ?? "no bwrap"}. Commit ${commit ?? "unknown"}. Run took ${elapsedS.toFixed(0)} s.\n\n` +
      `${md}\n`,
  );

  await writeResults(RESULTS_FILE, {
    date: started.toISOString(),
    commit,
    elapsedS,
    machine,
    parameters: {
      createRuns: CREATE_RUNS,
      rttWarmup: RTT_WARMUP,
      rttRuns: RTT_RUNS,
      files: FILE_CASES,
      percentiles: "nearest-rank",
      mb: 1e6,
    },
    goals: {
      roundTripOverFloorP50: GOAL_RTT_RATIO,
      fileThroughputOverPlain: GOAL_FILE_RATIO,
      warmCreateP50Ms: GOAL_WARM_CREATE_P50_MS,
    },
    headline: headline(results),
    skipped,
    results,
  });
  log(`wrote ${RESULTS_FILE}`);
}

await main();
