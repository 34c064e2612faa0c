/**
 * The official E2B JS SDK against an E2B-speaking target, next to a native floor measured in the
 * same run:
 *
 *   1. `Sandbox.create()` → `commands.run("true")` done, warm, through the SDK, interleaved with
 *      the same through Sandpit's native API (create, then `true`), p50/p95/p99 and the ratio;
 *   2. a code-interpreter cell round trip (`runCode("1")` in the default context of one sandbox),
 *      against the native floor: a cell `1` in a code context of a native sandbox, interleaved;
 *   3. 100 SDK creates at once: the time until all have answered, and each create's own time.
 *
 * Targets:
 *   --target fake     the loopback E2B fake (test/fakes/e2b.ts); the native floor is the local
 *                     provider (@sandpit/sdk, bubblewrap) on the same machine. The fake is NOT
 *                     Sandpit's E2B API: its numbers say what the SDK itself costs on loopback.
 *   --target cluster  Sandpit's E2B API on the provisioner (`/e2b`, a Sandpit key) on the running
 *                     test cluster, the E2B creates and the native ones (POST /v1/sandboxes, then
 *                     sandboxd through the provisioner's proxy) both served from one warm pool.
 *
 *   node_modules/.bin/node bench/src/e2b-sdk.ts --target fake      (from the repository root)
 *   node_modules/.bin/node bench/src/e2b-sdk.ts --target cluster   (as root; the cluster up)
 *   SANDPIT_BENCH_SMOKE=1 ...   (a few samples of each part)
 *
 * Prints a Markdown section on stdout (progress on stderr) and writes
 * bench/results/e2b-sdk-<target>.json. Nothing is asserted: the numbers are the result.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import { Sandbox } from "e2b";
import { LocalProvider, SandboxdClient } from "@sandpit/sdk";
import { ensureVenv } from "../../test/deerflow/python.ts";
import { FakeE2B } from "../../test/fakes/e2b.ts";
import {
  type ProvisionerProcess,
  clients,
  ensureCrds,
  pools,
  startOperator,
  startProvisioner,
  waitFor,
} from "../../test/cluster/harness.ts";
import {
  ROOT,
  benchNamespace,
  clusterImage,
  deleteNamespaceAndWait,
  runningCluster,
} from "./kube.ts";
import { commitMeasured, hostInfo, writeResults } from "./report.ts";
import { type Percentiles, percentiles } from "./stats.ts";

const SMOKE = process.env.SANDPIT_BENCH_SMOKE === "1";
const CREATES = SMOKE ? 5 : 50;
const CELLS = SMOKE ? 20 : 300;
const WARMUP = SMOKE ? 3 : 20;
const BURST = SMOKE ? 10 : 100;
/** Bound on the burst: it is reported as failed past this. */
const BURST_LIMIT_MS = 10 * 60_000;
/** Warm pods of the cluster's pool, all ready again before each create sample. */
const WARM_POOL = 2;

const log = (line: string) => process.stderr.write(`[e2b-sdk] ${line}\n`);
const now = () => performance.now();

/** One target: E2B connection options, a native create → `true`, and setup/teardown. */
interface Target {
  name: string;
  floorName: string;
  e2b: { apiKey: string; apiUrl: string; sandboxUrl: string };
  /** Sandpit's native path: create a sandbox, run `true`, return a remover (not timed). */
  nativeCreateRun(): Promise<() => Promise<void>>;
  /** A native code context: `run` executes the cell `1` in it. */
  nativeCell(): Promise<{ run: () => Promise<void>; close: () => Promise<void> }>;
  /** Waits until the next create is warm (the cluster's pool full again). */
  ready(): Promise<void>;
  close(): Promise<void>;
}

async function fakeTarget(): Promise<Target> {
  const fake = new FakeE2B();
  const url = await fake.start();
  const baseDir = await mkdtemp(join(os.tmpdir(), "sandpit-bench-e2b-"));
  const local = new LocalProvider({ baseDir, isolation: "bwrap" });
  return {
    name: "loopback E2B fake",
    floorName: "local provider (bubblewrap)",
    e2b: { apiKey: fake.apiKey, apiUrl: url, sandboxUrl: url },
    async nativeCreateRun() {
      const sbx = await local.create({ language: "python" });
      await sbx.commands.run("true");
      return () => sbx.kill();
    },
    async nativeCell() {
      const sbx = await local.create({ language: "python" });
      const context = await sbx.createCodeContext({ language: "python" });
      return {
        run: async () => {
          const r = await sbx.executeCode("1", "python", { context });
          if (r.results[0]?.text !== "1") throw new Error(`cell 1 gave ${JSON.stringify(r)}`);
        },
        close: () => sbx.kill(),
      };
    },
    ready: async () => undefined,
    async close() {
      await fake.close();
      await rm(baseDir, { recursive: true, force: true });
    },
  };
}

async function clusterTarget(): Promise<Target> {
  const kubeconfig = await runningCluster();
  const image = await clusterImage();
  const c = clients(kubeconfig);
  await ensureCrds(c);
  const ns = await benchNamespace(c, "bench-e2b");
  const op = await startOperator({ kubeconfig, namespace: ns, image });
  const pool = "warm";
  let prov: ProvisionerProcess | undefined;
  try {
    await pools.create(c, ns, pool, { warm: WARM_POOL, maxActive: 1000, template: {} });
    prov = await startProvisioner({
      kubeconfig,
      namespace: ns,
      keys: [
        { key: `bench-${randomBytes(12).toString("hex")}`, tenant: "bench", maxSandboxes: 1000 },
      ],
      // E2B's default templates map to the default pool: both APIs create from the warm pool.
      env: {
        SANDPIT_DEFAULT_POOL: pool,
        SANDPIT_E2B_TOKEN_SECRET: randomBytes(32).toString("base64url"),
      },
    });
  } catch (err) {
    await op.stop();
    await deleteNamespaceAndWait(c, ns, 10 * 60_000);
    throw err;
  }
  const p = prov;
  const full = async () => ((await pools.get(c, ns, pool)).status?.warmReady ?? 0) >= WARM_POOL;
  const api = (method: string, path: string, body?: unknown) =>
    fetch(`${p.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${p.apiKey}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(200_000),
    });
  return {
    name: "Sandpit provisioner /e2b (test cluster)",
    floorName: "Sandpit native API (POST /v1/sandboxes, sandboxd via the proxy)",
    e2b: { apiKey: p.apiKey, apiUrl: `${p.url}/e2b`, sandboxUrl: `${p.url}/e2b` },
    async nativeCreateRun() {
      const res = await api("POST", "/v1/sandboxes", { language: "python" });
      const view = (await res.json()) as { id: string };
      if (res.status !== 201 && res.status !== 200)
        throw new Error(`create answered ${res.status}: ${JSON.stringify(view)}`);
      const sbx = new SandboxdClient({
        baseUrl: `${p.url}/v1/sandboxes/${view.id}/proxy`,
        token: p.apiKey,
      });
      const r = await sbx.runCommand({ command: "true" });
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
      return async () => void (await api("DELETE", `/v1/sandboxes/${view.id}`));
    },
    async nativeCell() {
      const res = await api("POST", "/v1/sandboxes", { language: "python" });
      const view = (await res.json()) as { id: string };
      const proxy = `/v1/sandboxes/${view.id}/proxy`;
      const made = await api("POST", `${proxy}/v1/contexts`, { language: "python" });
      const ctx = (await made.json()) as { id: string };
      if (made.status !== 201) throw new Error(`context answered ${made.status}`);
      return {
        run: async () => {
          const r = await api("POST", `${proxy}/v1/contexts/${ctx.id}/execute`, { code: "1" });
          const events = await r.text();
          if (r.status !== 200 || !events.includes('"1"'))
            throw new Error(`cell 1 answered ${r.status}: ${events}`);
        },
        close: async () => void (await api("DELETE", `/v1/sandboxes/${view.id}`)),
      };
    },
    ready: async () =>
      void (await waitFor(`the pool's ${WARM_POOL} warm pods ready`, 300_000, full, 50)),
    async close() {
      await p.stop();
      await op.stop();
      await deleteNamespaceAndWait(c, ns, 10 * 60_000);
    },
  };
}

/**
 * The E2B Python SDK (the conformance suite's pinned venv), in one long-lived process
 * (bench/src/e2b_sdk_worker.py): each command is one timed sample, answered on a line.
 */
class PythonSdk {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: AsyncIterator<string>;
  #stderr = "";

  private constructor(child: ChildProcessWithoutNullStreams) {
    this.#child = child;
    child.stderr.on(
      "data",
      (b: Buffer) => (this.#stderr = (this.#stderr + b.toString()).slice(-4000)),
    );
    this.#lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  }

  static async start(e2b: Target["e2b"]): Promise<PythonSdk> {
    const python = await ensureVenv(log, join(ROOT, "test/e2b-compat/requirements.txt"));
    const child = spawn(python, [join(ROOT, "bench/src/e2b_sdk_worker.py")], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: process.env.HOME ?? "/tmp",
        E2B_API_KEY: e2b.apiKey,
        E2B_API_URL: e2b.apiUrl,
        E2B_SANDBOX_URL: e2b.sandboxUrl,
      },
    });
    return new PythonSdk(child);
  }

  async ask(command: string): Promise<number> {
    this.#child.stdin.write(`${command}\n`);
    const { value, done } = await this.#lines.next();
    if (done) throw new Error(`the Python SDK worker exited:\n${this.#stderr}`);
    if (value.startsWith("!")) throw new Error(value.slice(1));
    return Number(value);
  }

  close(): void {
    this.#child.stdin.end();
  }
}

/**
 * Part 1: create → `true` from each SDK against the native floor, interleaved (the order
 * rotates every round).
 */
async function createThenTrue(t: Target, py: PythonSdk) {
  const sdk: number[] = [];
  const python: number[] = [];
  const native: number[] = [];
  const sdkCreate = async () => {
    const t0 = now();
    const sbx = await Sandbox.create(t.e2b);
    await sbx.commands.run("true");
    const ms = now() - t0;
    await sbx.kill();
    return ms;
  };
  const nativeCreate = async () => {
    const t0 = now();
    const remove = await t.nativeCreateRun();
    const ms = now() - t0;
    await remove();
    return ms;
  };
  const pythonCreate = () => py.ask("create");
  const series = [
    { into: sdk, take: sdkCreate },
    { into: python, take: pythonCreate },
    { into: native, take: nativeCreate },
  ];
  for (let i = 0; i < WARMUP / 4 + 1; i++) {
    for (const s of series) {
      await t.ready();
      await s.take();
    }
  }
  // A create that fails (a client's own request timeout, say) is counted and reported, not
  // timed; the run goes on, so one stuck create does not lose the other samples.
  const failures: string[] = [];
  for (let i = 0; i < CREATES; i++) {
    for (let k = 0; k < series.length; k++) {
      const s = series[(i + k) % series.length]!;
      await t.ready();
      try {
        s.into.push(await s.take());
      } catch (err) {
        const name = s.into === sdk ? "JS SDK" : s.into === python ? "Python SDK" : "native";
        failures.push(`${name}: ${(err as Error).message}`);
        log(`create ${i + 1} (${name}) failed: ${(err as Error).message}`);
      }
    }
    if ((i + 1) % 10 === 0) log(`create → true: ${i + 1}/${CREATES}`);
  }
  return {
    failures,
    sdk: percentiles(sdk),
    python: percentiles(python),
    native: percentiles(native),
    ratioP50: percentiles(sdk).p50 / percentiles(native).p50,
    pythonRatioP50: percentiles(python).p50 / percentiles(native).p50,
  };
}

/** Part 2: a cell's round trip through the SDK, against a native context's, interleaved. */
async function cellRoundTrip(t: Target, py: PythonSdk) {
  await t.ready();
  const ci = await CodeInterpreter.create({ ...t.e2b, timeoutMs: 1_800_000 });
  await t.ready();
  const floor = await t.nativeCell();
  await t.ready();
  await py.ask("cell-open");
  try {
    const timed = (run: () => Promise<unknown>) => async () => {
      const t0 = now();
      await run();
      return now() - t0;
    };
    const sdkCell = timed(async () => {
      const r = await ci.runCode("1");
      if (r.text !== "1") throw new Error(`runCode("1") gave ${JSON.stringify(r.toJSON())}`);
    });
    const cell: number[] = [];
    const python: number[] = [];
    const native: number[] = [];
    const series = [
      { into: cell, take: sdkCell },
      // The worker times its own call: no pipe to it in the sample.
      { into: python, take: () => py.ask("cell") },
      { into: native, take: timed(floor.run) },
    ];
    for (let i = 0; i < WARMUP; i++) for (const s of series) await s.take();
    for (let i = 0; i < CELLS; i++) {
      for (let k = 0; k < series.length; k++) {
        const s = series[(i + k) % series.length]!;
        s.into.push(await s.take());
      }
    }
    return {
      cell: percentiles(cell),
      python: percentiles(python),
      native: percentiles(native),
      ratioP50: percentiles(cell).p50 / percentiles(native).p50,
      pythonRatioP50: percentiles(python).p50 / percentiles(native).p50,
    };
  } finally {
    await ci.kill();
    await py.ask("cell-close");
    await floor.close();
  }
}

/** Part 3: BURST creates at once, bounded in time; every sandbox is killed afterwards. */
async function burst(t: Target) {
  await t.ready();
  const each: number[] = [];
  const made: Sandbox[] = [];
  const errors: string[] = [];
  const t0 = now();
  const all = Promise.all(
    Array.from({ length: BURST }, async () => {
      const s0 = now();
      try {
        made.push(await Sandbox.create({ ...t.e2b, timeoutMs: 600_000 }));
        each.push(now() - s0);
      } catch (err) {
        errors.push((err as Error).message);
      }
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  const bounded = await Promise.race([
    all.then(() => true as const),
    new Promise<false>((r) => (timer = setTimeout(() => r(false), BURST_LIMIT_MS))),
  ]);
  clearTimeout(timer);
  const wallMs = now() - t0;
  await all;
  await Promise.all(made.map((s) => s.kill().catch(() => false)));
  return {
    n: BURST,
    ok: each.length,
    errors: errors.slice(0, 5),
    withinLimit: bounded,
    wallMs,
    each: each.length ? percentiles(each) : null,
  };
}

const f = (ms: number) => ms.toFixed(1);

function section(r: {
  target: string;
  floor: string;
  date: string;
  commit: string | null;
  create: Awaited<ReturnType<typeof createThenTrue>>;
  cell: Awaited<ReturnType<typeof cellRoundTrip>>;
  burst: Awaited<ReturnType<typeof burst>>;
}): string {
  const row = (name: string, p: Percentiles) =>
    `| ${name} | ${p.n} | ${f(p.p50)} | ${f(p.p95)} | ${f(p.p99)} |`;
  return [
    `### E2B SDKs against ${r.target} (${r.date.slice(0, 10)}, ${r.commit ?? "uncommitted"})`,
    "",
    '`Sandbox.create()` → `commands.run("true")` done, warm, in ms:',
    "",
    "| path | n | p50 | p95 | p99 |",
    "| --- | --- | --- | --- | --- |",
    row("E2B JS SDK (`e2b` on npm)", r.create.sdk),
    row("E2B Python SDK (`e2b` on PyPI; timed in Python)", r.create.python),
    row(r.floor, r.create.native),
    "",
    `Ratio at p50: JS ${r.create.ratioP50.toFixed(2)}x, Python ${r.create.pythonRatioP50.toFixed(2)}x.` +
      (r.create.failures.length
        ? ` **${r.create.failures.length} create(s) failed** and are not in the samples: ${r.create.failures.slice(0, 5).join("; ")}.`
        : ""),
    "",
    'Code interpreter cell round trip (`runCode("1")`, the default context), in ms:',
    "",
    "| call | n | p50 | p95 | p99 |",
    "| --- | --- | --- | --- | --- |",
    row('JS `runCode("1")`', r.cell.cell),
    row('Python `run_code("1")` (timed in Python)', r.cell.python),
    row(`cell \`1\` in a context, ${r.floor}`, r.cell.native),
    "",
    `Ratio at p50: JS ${r.cell.ratioP50.toFixed(2)}x, Python ${r.cell.pythonRatioP50.toFixed(2)}x.`,
    "",
    `${r.burst.n} SDK creates at once: ${r.burst.ok} answered in ${f(r.burst.wallMs)} ms` +
      (r.burst.each
        ? `; each create p50 ${f(r.burst.each.p50)}, p95 ${f(r.burst.each.p95)}, p99 ${f(r.burst.each.p99)} ms`
        : "") +
      (r.burst.errors.length ? `; errors: ${r.burst.errors.join("; ")}` : "") +
      (r.burst.withinLimit ? "." : ` (not all within ${BURST_LIMIT_MS / 60_000} min).`),
    "",
  ].join("\n");
}

async function main(): Promise<void> {
  const i = process.argv.indexOf("--target");
  const which = i >= 0 ? process.argv[i + 1] : undefined;
  if (which !== "fake" && which !== "cluster")
    throw new Error("usage: bench/src/e2b-sdk.ts --target fake|cluster");
  const t = which === "fake" ? await fakeTarget() : await clusterTarget();
  const date = new Date().toISOString();
  let py: PythonSdk | undefined;
  try {
    log(`target: ${t.name}`);
    py = await PythonSdk.start(t.e2b);
    const create = await createThenTrue(t, py);
    log(
      `create → true p50: SDK ${f(create.sdk.p50)} ms, ${t.floorName} ${f(create.native.p50)} ms`,
    );
    const cell = await cellRoundTrip(t, py);
    log(`cell p50: SDK ${f(cell.cell.p50)} ms, native ${f(cell.native.p50)} ms`);
    const b = await burst(t);
    log(`burst: ${b.ok}/${b.n} in ${f(b.wallMs)} ms`);
    const record = {
      date,
      commit: commitMeasured(),
      host: hostInfo(),
      target: t.name,
      floor: t.floorName,
      smoke: SMOKE,
      create,
      cell,
      burst: b,
    };
    if (!SMOKE) await writeResults(join(ROOT, "bench", "results", `e2b-sdk-${which}.json`), record);
    process.stdout.write(section({ ...record, burst: b }));
  } finally {
    py?.close();
    await t.close();
  }
}

await main();
