/**
 * sandboxd's start-up time and idle memory, against bare Node in the same run.
 *
 * sandboxd runs as the image runs it: the esbuild bundle images/build.ts makes, in a directory laid
 * out like the image's (dist/sandboxd.mjs and its chunks, runners/, node_modules/node-pty), with the image's
 * sandboxd settings, as a plain host process on 127.0.0.1 with a temporary workspace. Each round
 * (order rotated, so no case always runs on a warmer cache) times:
 *  - sandboxd: spawn → its ready line → first answered `GET /healthz`; then its RSS
 *    (/proc/<pid>/status VmRSS) after IDLE_MS idle;
 *  - floors: `node -e 0` (spawn → exit), a bare `node:http` server (spawn → first answered
 *    request, and its idle RSS), and a bare idle `node` (a timer, nothing else: its idle RSS).
 * Goals (issue 17): sandboxd idle RSS ≤ 1.3x the bare idle node's, start → first answer ≤ 3x
 * `node -e 0`, both at p50.
 *
 * `--profile` adds one sandboxd start under `--cpu-prof` and reports self time by the bundle's
 * input module (esbuild marks each module's start in its output with a `// path` comment), and
 * the bundle's bytes by package (esbuild's metafile), all files and those loaded at start.
 *
 * Prints a Markdown table on stdout (progress on stderr) and writes bench/results/sandboxd-start.json.
 *
 *   node bench/src/sandboxd-start.ts [--rounds 30] [--profile]      (from the repository root)
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { createRequire } from "node:module";
import os from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { Metafile } from "esbuild";
import { bundleSandboxdWithMetafile } from "../../images/build.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { type Percentiles, percentiles } from "./stats.ts";

const WARMUP = 3;
const IDLE_MS = 1000;
const GOAL_RSS_RATIO = 1.3;
const GOAL_START_RATIO = 3;
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const RESULTS_FILE = join(ROOT, "bench", "results", "sandboxd-start.json");
/** The sandboxd settings the image's Dockerfile sets (images/build.ts), but the address. */
const IMAGE_SETTINGS = {
  SANDBOXD_PYTHON: "/usr/bin/python3",
  SANDBOXD_PYTHON_PREFIX: "/usr",
  SANDBOXD_AIO_PATHS: "any",
};

const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const now = () => performance.now();

/** A started child: its pid, and a promise of its exit. */
function start(argv: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()).slice(-4096));
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  const firstLine = new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once("line", resolve);
    void exited.then((code) =>
      reject(new Error(`exited ${code} before its ready line: ${stderr}`)),
    );
  });
  // Not every case waits for a line (`node -e 0` prints none): a rejection nobody awaits is fine.
  firstLine.catch(() => undefined);
  return { child, exited, firstLine };
}

function get(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, agent: false }, (res) => {
      res.resume();
      res.once("end", () => resolve(res.statusCode ?? 0));
    });
    req.once("error", reject);
    req.end();
  });
}

async function rssKiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]);
}

/** The RSS of `pid`'s child processes (sandboxd's spare Python interpreter), summed. */
async function childrenRssKiB(pid: number): Promise<number> {
  const children = await readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
  let sum = 0;
  for (const c of children.split(" ").filter(Boolean))
    sum += await rssKiB(Number(c)).catch(() => 0);
  return sum;
}

/** Spawn → ready line (`{"port":...}`) → first answered GET; then RSS after IDLE_MS; then SIGTERM. */
async function server(argv: string[], env: NodeJS.ProcessEnv, path: string) {
  const t0 = now();
  const p = start(argv, env);
  try {
    const { port } = JSON.parse(await p.firstLine) as { port: number };
    const status = await get(port, path);
    const ms = now() - t0;
    if (status !== 200) throw new Error(`GET ${path}: ${status}`);
    await new Promise((r) => setTimeout(r, IDLE_MS));
    return {
      ms,
      rssKiB: await rssKiB(p.child.pid!),
      childrenKiB: await childrenRssKiB(p.child.pid!),
    };
  } finally {
    p.child.kill("SIGTERM");
    await p.exited;
  }
}

const HTTP_FLOOR = `require("node:http").createServer((q, s) => s.end("ok")).listen(0, "127.0.0.1", function () { console.log(JSON.stringify({ port: this.address().port })); });`;
const IDLE_FLOOR = `setInterval(() => {}, 1e9); console.log("{}");`;

/** The image's sandboxd directory, laid out in `dir`: dist/sandboxd.mjs and its chunks, runners/, node_modules/node-pty. */
async function layOutSandboxd(dir: string): Promise<{ entry: string; metafile: Metafile }> {
  const { files, metafile } = await bundleSandboxdWithMetafile();
  const entry = join(dir, "sandboxd", "dist", "sandboxd.mjs");
  await mkdir(dirname(entry), { recursive: true });
  for (const f of files) await writeFile(join(dirname(entry), f.path), f.contents);
  await symlink(join(ROOT, "sandboxd", "runners"), join(dir, "sandboxd", "runners"));
  const pty = dirname(
    createRequire(join(ROOT, "sandboxd", "package.json")).resolve("node-pty/package.json"),
  );
  await mkdir(join(dir, "sandboxd", "node_modules"));
  await symlink(pty, join(dir, "sandboxd", "node_modules", "node-pty"));
  return { entry, metafile };
}

/** The output files a start loads: the entry (dist/sandboxd.mjs) and what it imports statically. */
function loadedAtStart(metafile: Metafile): string[] {
  const entry = Object.keys(metafile.outputs).find((f) => f.endsWith("/sandboxd.mjs"));
  if (!entry) throw new Error("no sandboxd.mjs in the metafile");
  const seen = new Set<string>();
  const visit = (f: string) => {
    if (seen.has(f)) return;
    seen.add(f);
    for (const i of metafile.outputs[f]!.imports)
      if (i.kind === "import-statement" && !i.external) visit(i.path);
  };
  visit(entry);
  return [...seen];
}

/** Bundle bytes by package (node_modules/<pkg>) or source directory, in `outputs` (default all). */
function bytesByPackage(
  metafile: Metafile,
  outputs = Object.keys(metafile.outputs),
): Record<string, number> {
  const by: Record<string, number> = {};
  for (const o of outputs)
    for (const [file, v] of Object.entries(metafile.outputs[o]!.inputs))
      by[packageOf(file)] = (by[packageOf(file)] ?? 0) + v.bytesInOutput;
  return sortDesc(by);
}

const bytesOf = (metafile: Metafile, outputs = Object.keys(metafile.outputs)) =>
  outputs.reduce((n, o) => n + metafile.outputs[o]!.bytes, 0);

function packageOf(file: string): string {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file);
  return m ? m[1]! : file;
}

function sortDesc(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).sort((a, b) => b[1] - a[1]));
}

interface CpuProfile {
  nodes: { id: number; callFrame: { url: string; functionName: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * One sandboxd start under --cpu-prof until its first answer (then SIGTERM, which writes the
 * profile): self time (ms) by the bundle's input module, or by Node's own module for Node code.
 */
async function profileStart(entry: string, env: NodeJS.ProcessEnv, dir: string) {
  const profDir = join(dir, "prof");
  const t0 = now();
  const p = start(
    ["--cpu-prof", "--cpu-prof-dir", profDir, "--cpu-prof-interval", "100", entry],
    env,
  );
  const { port } = JSON.parse(await p.firstLine) as { port: number };
  await get(port, "/healthz");
  const ms = now() - t0;
  p.child.kill("SIGTERM");
  await p.exited;
  const file = (await readdir(profDir)).find((f) => f.endsWith(".cpuprofile"));
  if (!file) throw new Error("no CPU profile written");
  const prof = JSON.parse(await readFile(join(profDir, file), "utf8")) as CpuProfile;
  // Module start lines in each of the bundle's files, ascending.
  const marks = new Map<string, [number, string][]>();
  for (const f of await readdir(dirname(entry))) {
    const at: [number, string][] = [];
    (await readFile(join(dirname(entry), f), "utf8")).split("\n").forEach((line, i) => {
      const m = /^\/\/ (\S+\.(?:[cm]?js|ts|json))$/.exec(line);
      if (m) at.push([i, m[1]!]);
    });
    marks.set(f, at);
  }
  const moduleAt = (file: string, line: number) => {
    let found = "(bundle top level)";
    for (const [at, name] of marks.get(file) ?? []) if (at <= line) found = name;
    return found;
  };
  const selfUs = new Map<number, number>();
  prof.samples.forEach((id, i) =>
    selfUs.set(id, (selfUs.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0)),
  );
  const by: Record<string, number> = {};
  for (const n of prof.nodes) {
    const us = selfUs.get(n.id) ?? 0;
    if (!us) continue;
    const { url, functionName, lineNumber } = n.callFrame;
    const file = url.slice(url.lastIndexOf("/") + 1);
    const key = marks.has(file)
      ? packageOf(moduleAt(file, lineNumber))
      : url.startsWith("node:")
        ? `${url} ${functionName}`
        : `(${functionName || "native"})`;
    by[key] = (by[key] ?? 0) + us / 1000;
  }
  return { startToFirstAnswerMs: ms, selfMsBy: sortDesc(by) };
}

async function main() {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "30" },
      profile: { type: "boolean", default: false },
    },
  });
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1)
    throw new Error("--rounds must be a positive integer");
  const dir = await mkdtemp(join(os.tmpdir(), "sandpit-bench-sandboxd-"));
  try {
    const { entry, metafile } = await layOutSandboxd(dir);
    const workspace = join(dir, "workspace");
    await mkdir(workspace);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: workspace,
      LANG: "C.UTF-8",
      ...IMAGE_SETTINGS,
      SANDBOXD_ROOT: workspace,
      SANDBOXD_LISTEN: "127.0.0.1:0",
      SANDBOXD_TOKEN: randomBytes(24).toString("hex"),
    };
    const floorEnv = { PATH: process.env.PATH, HOME: workspace };
    const cases: Record<
      string,
      () => Promise<{ ms?: number; rssKiB?: number; childrenKiB?: number }>
    > = {
      sandboxd: () => server([entry], env, "/healthz"),
      "node -e 0": async () => {
        const t0 = now();
        const p = start(["-e", "0"], floorEnv);
        const code = await p.exited;
        if (code !== 0) throw new Error(`node -e 0 exited ${code}`);
        return { ms: now() - t0 };
      },
      "bare node:http server": () => server(["-e", HTTP_FLOOR], floorEnv, "/"),
      "bare idle node": async () => {
        const p = start(["-e", IDLE_FLOOR], floorEnv);
        try {
          await p.firstLine;
          await new Promise((r) => setTimeout(r, IDLE_MS));
          return { rssKiB: await rssKiB(p.child.pid!) };
        } finally {
          p.child.kill("SIGTERM");
          await p.exited;
        }
      },
    };
    const ms: Record<string, number[]> = {};
    const rss: Record<string, number[]> = {};
    const started = Date.now();
    const loadStart = os.loadavg()[0]!;
    const names = Object.keys(cases);
    for (let i = 0; i < WARMUP + rounds; i++) {
      const order = [...names.slice(i % names.length), ...names.slice(0, i % names.length)];
      for (const name of order) {
        const r = await cases[name]!();
        if (i < WARMUP) continue;
        if (r.ms !== undefined) (ms[name] ??= []).push(r.ms);
        if (r.rssKiB !== undefined) (rss[name] ??= []).push(r.rssKiB / 1024);
        if (r.childrenKiB) (rss[`${name}: its child processes`] ??= []).push(r.childrenKiB / 1024);
      }
      if (i % 5 === 0) log(`round ${i + 1}/${WARMUP + rounds}`);
    }
    const profile = values.profile ? await profileStart(entry, env, dir) : null;
    const loadEnd = os.loadavg()[0]!;

    const startMs = Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, percentiles(v)]));
    const rssMiB = Object.fromEntries(Object.entries(rss).map(([k, v]) => [k, percentiles(v)]));
    const startRatio = startMs.sandboxd!.p50 / startMs["node -e 0"]!.p50;
    const rssRatio = rssMiB.sandboxd!.p50 / rssMiB["bare idle node"]!.p50;
    const headline = [
      {
        metric: "sandboxd idle RSS / bare node process RSS",
        value: `${rssMiB.sandboxd!.p50.toFixed(1)} MiB`,
        floor: `${rssMiB["bare idle node"]!.p50.toFixed(1)} MiB`,
        ratio: rssRatio,
        goal: `≤ ${GOAL_RSS_RATIO}x`,
        met: rssRatio <= GOAL_RSS_RATIO,
      },
      {
        metric: "sandboxd start → first answered request / node -e 0",
        value: `${startMs.sandboxd!.p50.toFixed(1)} ms`,
        floor: `${startMs["node -e 0"]!.p50.toFixed(1)} ms`,
        ratio: startRatio,
        goal: `≤ ${GOAL_START_RATIO}x`,
        met: startRatio <= GOAL_START_RATIO,
      },
    ];

    const f = (p: Percentiles) => `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)} / ${p.p99.toFixed(1)}`;
    const out = [
      `| Case (N=${rounds}) | start → first answer, ms p50 / p95 / p99 | ratio to \`node -e 0\` p50 | idle RSS, MiB p50 / p95 / p99 | ratio to bare idle node p50 |`,
      "| --- | ---: | ---: | ---: | ---: |",
      ...[...names, ...Object.keys(rss).filter((n) => !names.includes(n))].map((n) => {
        const s = startMs[n];
        const r = rssMiB[n];
        return `| ${n} | ${s ? f(s) : "–"} | ${s ? `${(s.p50 / startMs["node -e 0"]!.p50).toFixed(2)}x` : "–"} | ${r ? f(r) : "–"} | ${r ? `${(r.p50 / rssMiB["bare idle node"]!.p50).toFixed(2)}x` : "–"} |`;
      }),
      "",
      `load average (1 min): ${loadStart.toFixed(2)} at the start, ${loadEnd.toFixed(2)} at the end`,
      `bundle: ${bytesOf(metafile, loadedAtStart(metafile))} bytes loaded at start, ${bytesOf(metafile)} in all (${Object.keys(metafile.outputs).length} files)`,
    ];
    process.stdout.write(`${out.join("\n")}\n`);
    const bytes = bytesByPackage(metafile);
    const bytesAtStart = bytesByPackage(metafile, loadedAtStart(metafile));
    if (profile) {
      process.stdout.write(
        `\nprofiled start: ${profile.startToFirstAnswerMs.toFixed(1)} ms; self time by module (ms):\n`,
      );
      for (const [k, v] of Object.entries(profile.selfMsBy).slice(0, 20))
        process.stdout.write(`  ${v.toFixed(1).padStart(7)}  ${k}\n`);
      process.stdout.write("bundle bytes by package, loaded at start:\n");
      for (const [k, v] of Object.entries(bytesAtStart).slice(0, 15))
        process.stdout.write(`  ${String(v).padStart(8)}  ${k}\n`);
      process.stdout.write("bundle bytes by package, all files:\n");
      for (const [k, v] of Object.entries(bytes).slice(0, 15))
        process.stdout.write(`  ${String(v).padStart(8)}  ${k}\n`);
    }
    await writeResults(RESULTS_FILE, {
      benchmark: "sandboxd-start",
      ranAt: new Date(started).toISOString(),
      durationS: (Date.now() - started) / 1000,
      commit: commitMeasured(),
      host: hostInfo(),
      loadAverage: { start: loadStart, end: loadEnd },
      parameters: { rounds, warmup: WARMUP, idleMs: IDLE_MS, percentiles: "nearest-rank" },
      headline,
      results: { startMs, rssMiB, startRatioP50: startRatio, rssRatioP50: rssRatio },
      bundle: {
        bytes: bytesOf(metafile),
        bytesAtStart: bytesOf(metafile, loadedAtStart(metafile)),
        files: Object.keys(metafile.outputs).length,
        bytesByPackage: bytes,
        bytesByPackageAtStart: bytesAtStart,
      },
      ...(profile ? { profile } : {}),
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
