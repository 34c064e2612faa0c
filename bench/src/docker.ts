/**
 * Docker-provider benchmark, in one run and one process (plus the llm-sandbox helper):
 *  1. cold create -> first command done: create({ language: "python", threadId: fresh }) until
 *     commands.run("true") resolves, against the floor `docker run --rm --entrypoint /bin/true
 *     <image>` (the docker CLI, spawned), interleaved; each sandbox killed after (not timed).
 *     Every engine API call and waitReady is timed on the side for a breakdown, and a separate,
 *     untimed diagnostic pass polls sandboxd's /healthz every 2 ms to see when it really answers;
 *  2. warm-pool acquire -> first command: a provider with warm: 1; fillWarmPool() awaited
 *     (untimed) before each timed create + commands.run("true");
 *  3. commands.run("true") round trip on one warm sandbox (network on: published port; and, for
 *     reference, network off: unix socket), against `docker exec <container> true`;
 *  4. 20 concurrent creates (+ first command each), Promise.all: wall time and per-create;
 *  5. the peer llm-sandbox (PyPI, Docker backend, driven by llm-sandbox/bench.py over stdin) on
 *     the same image: create -> first run("print(1)"), interleaved with ours: create ->
 *     executeCode("print(1)", "python").
 * Every section has its own containerPrefix (all start with "sandpit-bench-"); whatever is left
 * with that prefix (containers, volumes) is removed at the end, also on failure.
 * Prints a Markdown table on stdout (progress on stderr) and writes bench/results/docker.json.
 *
 *   node bench/src/docker.ts        (from the repository root)
 */
import {
  execFile,
  spawn,
  spawnSync,
  type ChildProcessWithoutNullStreams,
} from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { SandboxInstance } from "@sandpit/sdk";
import { DockerProvider } from "@sandpit/sdk/docker";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import { type HeadlineRow, commitMeasured, hostInfo, writeResults } from "./report.ts";
import { median, percentile, summarize, type Summary } from "./stats.ts";

const IMAGE = "sandpit-sandbox:latest";
const PREFIX = "sandpit-bench-";
const COLD_RUNS = 20;
const DIAG_RUNS = 10;
const WARM_RUNS = 20;
const WARM_DIAG_RUNS = 10;
const RTT_WARMUP = 30;
const RTT_RUNS = 300;
const EXEC_FLOOR_RUNS = 30;
const CONCURRENT = 20;
const PEER_RUNS = 10;
/** Issue 17's goals: cold create within 1.15x of `docker run`, a warm acquire in 10 ms (p50). */
const GOAL_COLD_RATIO = 1.15;
const GOAL_WARM_P50_MS = 10;
const GOAL_RTT_P50_MS = 5;
const HERE = dirname(fileURLToPath(import.meta.url));
const RESULTS_FILE = join(HERE, "..", "results", "docker.json");
const PEER_DIR = join(HERE, "llm-sandbox");
const PEER_PYTHON = join(PEER_DIR, ".venv", "bin", "python");
const FLOOR_ARGS = ["run", "--rm", "--entrypoint", "/bin/true", IMAGE];

const now = () => performance.now();
const p95 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    95,
  );
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const run = promisify(execFile);
const fresh = () => `bench-${randomBytes(6).toString("hex")}`;

/** One engine API call made by the provider (DockerRuntime's private `call` wrapper). */
interface EngineCall {
  what: string;
  start: number;
  ms: number;
}

/** What the provider did during one timed operation. */
class Tracer {
  calls: EngineCall[] = [];
  waitReady: { start: number; ms: number }[] = [];
  fillInvokedAt: number[] = [];
  reset(): void {
    this.calls = [];
    this.waitReady = [];
    this.fillInvokedAt = [];
  }
}

/**
 * Wraps the provider's engine calls and waitReady (bench-side, the provider is not changed) so
 * each create can be broken down. The wrappers only read the clock.
 */
async function instrument(provider: DockerProvider): Promise<Tracer> {
  const tracer = new Tracer();
  const rt = (await provider.runtime()) as unknown as {
    call: <T>(what: string, op: () => Promise<T>) => Promise<T>;
  };
  const call = rt.call.bind(rt);
  rt.call = async <T>(what: string, op: () => Promise<T>): Promise<T> => {
    const start = now();
    try {
      return await call(what, op);
    } finally {
      tracer.calls.push({ what, start, ms: now() - start });
    }
  };
  const waitReady = provider.waitReady.bind(provider);
  provider.waitReady = async (...args) => {
    const start = now();
    try {
      return await waitReady(...args);
    } finally {
      tracer.waitReady.push({ start, ms: now() - start });
    }
  };
  const fill = provider.fillWarmPool.bind(provider);
  provider.fillWarmPool = () => {
    tracer.fillInvokedAt.push(now());
    return fill();
  };
  return tracer;
}

function newProvider(
  section: string,
  basePort: number,
  extra: { warm?: number; network?: boolean } = {},
) {
  return new DockerProvider({
    image: IMAGE,
    containerPrefix: `${PREFIX}${section}`,
    basePort,
    idleTimeoutMs: 0, // no reaper during the run
    ...extra,
  });
}

async function runTrue(sbx: SandboxInstance): Promise<void> {
  const r = await sbx.commands.run("true");
  if (r.exitCode !== 0)
    throw new Error(`"true" exited with ${r.exitCode} in ${sbx.sandboxId}: ${r.stderr}`);
}

function docker(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("docker", args, { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", reject);
    child.once("close", (code) =>
      code === 0 ? resolve() : reject(new Error(`docker ${args.join(" ")} exited ${code}: ${err}`)),
    );
  });
}

// ---------------------------------------------------------------------------------------------
// 1. Cold create

interface ColdResult {
  oursMs: Summary;
  createOnlyMs: Summary;
  floorMs: Summary;
  ratioP50: number;
  /** Medians over the timed runs, ms: each engine call kind (summed per create), waitReady, the rest. */
  breakdownP50: Record<string, number>;
  engineCallsPerCreate: number;
  /** Diagnostic pass (not timed above): when /healthz first answers vs when waitReady returned. */
  readiness: {
    runs: number;
    /** From the start call's return (container running) to the first /healthz answer (2 ms polls). */
    startedToHealthyMs: Summary;
    /** From that first answer to waitReady's return: the poll backoff's overshoot. */
    healthyToWaitReadyReturnMs: Summary;
  };
}

async function benchCold(): Promise<ColdResult> {
  const provider = newProvider("cold", 38100);
  const tracer = await instrument(provider);
  try {
    // Untimed warm-up of both sides (engine detection, first image inspect, page cache).
    for (let i = 0; i < 2; i++) {
      const s = await provider.create({ language: "python", threadId: fresh() });
      await runTrue(s);
      await s.kill();
      await docker(FLOOR_ARGS);
    }
    const ours: number[] = [];
    const createOnly: number[] = [];
    const floor: number[] = [];
    const parts: Record<string, number[]> = {};
    const add = (k: string, v: number) => (parts[k] ??= []).push(v);
    const calls: number[] = [];
    const measureOurs = async () => {
      tracer.reset();
      const t0 = now();
      const sbx = await provider.create({ language: "python", threadId: fresh() });
      const t1 = now();
      await runTrue(sbx);
      const t2 = now();
      ours.push(t2 - t0);
      createOnly.push(t1 - t0);
      const byKind: Record<string, number> = {};
      for (const c of tracer.calls) byKind[c.what] = (byKind[c.what] ?? 0) + c.ms;
      for (const k of ["inspect image", "inspect", "list", "create volume", "create", "start"])
        add(`engine: ${k}`, byKind[k] ?? 0);
      const engine = tracer.calls.reduce((a, c) => a + c.ms, 0);
      const ready = tracer.waitReady.reduce((a, w) => a + w.ms, 0);
      add("engine: all calls", engine);
      add("waitReady (sandboxd /healthz polling)", ready);
      add("rest of create() (record write, JS)", t1 - t0 - engine - ready);
      add('first commands.run("true")', t2 - t1);
      calls.push(tracer.calls.length);
      await sbx.kill();
    };
    const measureFloor = async () => {
      const t = now();
      await docker(FLOOR_ARGS);
      floor.push(now() - t);
    };
    for (let i = 0; i < COLD_RUNS; i++) {
      if (i % 2 === 0) {
        await measureOurs();
        await measureFloor();
      } else {
        await measureFloor();
        await measureOurs();
      }
    }
    log(`cold: ${COLD_RUNS} creates + ${COLD_RUNS} floor runs done`);

    // Diagnostic: poll /healthz every 2 ms from the moment the start call returns.
    const startedToHealthy: number[] = [];
    const overshoot: number[] = [];
    for (let i = 0; i < DIAG_RUNS; i++) {
      tracer.reset();
      let healthyAt: number | null = null;
      let stop = false;
      const rt = await provider.runtime();
      const origRun = rt.run.bind(rt);
      let startedAt = 0;
      rt.run = async (spec) => {
        const info = await origRun(spec);
        const startCall = tracer.calls.findLast((c) => c.what === "start");
        startedAt = startCall ? startCall.start + startCall.ms : now();
        const url = `http://${info.endpoint}/healthz`;
        void (async () => {
          const deadline = now() + 30_000;
          while (!stop && now() < deadline) {
            try {
              const res = await fetch(url, { signal: AbortSignal.timeout(500) });
              await res.arrayBuffer();
              if (res.ok) {
                healthyAt = now();
                return;
              }
            } catch {
              // not up yet
            }
            await new Promise((r) => setTimeout(r, 2));
          }
        })();
        return info;
      };
      try {
        const sbx = await provider.create({ language: "python", threadId: fresh() });
        const w = tracer.waitReady[0];
        // Let the poller see the answer if waitReady won the race.
        for (let k = 0; k < 100 && healthyAt === null; k++)
          await new Promise((r) => setTimeout(r, 5));
        stop = true;
        if (healthyAt !== null && w) {
          startedToHealthy.push(healthyAt - startedAt);
          overshoot.push(w.start + w.ms - healthyAt);
        }
        await sbx.kill();
      } finally {
        stop = true;
        rt.run = origRun;
      }
    }
    log(`cold: ${DIAG_RUNS} readiness diagnostics done`);

    const oursMs = summarize(ours);
    const floorMs = summarize(floor);
    return {
      oursMs,
      createOnlyMs: summarize(createOnly),
      floorMs,
      ratioP50: oursMs.p50 / floorMs.p50,
      breakdownP50: Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, median(v)])),
      engineCallsPerCreate: median(calls),
      readiness: {
        runs: startedToHealthy.length,
        startedToHealthyMs: summarize(startedToHealthy),
        healthyToWaitReadyReturnMs: summarize(overshoot),
      },
    };
  } finally {
    await provider.close();
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Warm-pool acquire

interface WarmResult {
  oursMs: Summary;
  oursP95Ms: number;
  /**
   * Same-run floor: `commands.run("true")` on a sandbox that is already running, over its open
   * connection (a direct request to a running container's sandboxd), after each timed claim.
   */
  floorMs: Summary;
  floorP95Ms: number;
  createOnlyMs: Summary;
  /** Medians per claim: engine calls made by create() itself (before it triggers the refill). */
  claimEngineCalls: number;
  claimEngineCallKinds: Record<string, number>;
  claimEngineMsP50: number;
  /** waitReady inside the claim (one /healthz), median ms. */
  claimWaitReadyMsP50: number;
  firstCommandMsP50: number;
  /** Timed windows that overlapped the background refill started by create() itself. */
  refillOverlapsTimedWindow: boolean;
  /**
   * Diagnostic, not the provider's behaviour: the same acquire with the refill that create()
   * starts held back (bench-side) until the first command is done, to show what it costs.
   */
  refillHeldMs: Summary;
  refillHeldFirstCommandMs: Summary;
}

async function benchWarm(): Promise<WarmResult> {
  const provider = newProvider("warm", 38300, { warm: 1 });
  const tracer = await instrument(provider);
  try {
    await provider.fillWarmPool();
    const ref = await provider.create({ language: "python", threadId: fresh() });
    for (let i = 0; i < 5; i++) await runTrue(ref);
    await provider.fillWarmPool();
    const floor: number[] = [];
    // Untimed warm-up claims.
    for (let i = 0; i < 2; i++) {
      const s = await provider.create({ language: "python", threadId: fresh() });
      await runTrue(s);
      await provider.fillWarmPool();
      await s.kill();
    }
    const ours: number[] = [];
    const createOnly: number[] = [];
    const firstCmd: number[] = [];
    const nCalls: number[] = [];
    const engineMs: number[] = [];
    const ready: number[] = [];
    let kinds: Record<string, number> = {};
    let overlap = false;
    const made: SandboxInstance[] = [];
    for (let i = 0; i < WARM_RUNS; i++) {
      await provider.fillWarmPool(); // untimed: the pool holds one ready container
      tracer.reset();
      const t0 = now();
      const sbx = await provider.create({ language: "python", threadId: fresh() });
      const t1 = now();
      await runTrue(sbx);
      const t2 = now();
      ours.push(t2 - t0);
      createOnly.push(t1 - t0);
      firstCmd.push(t2 - t1);
      const t3 = now();
      await runTrue(ref);
      floor.push(now() - t3);
      const fillAt = tracer.fillInvokedAt[0] ?? Infinity;
      if (fillAt < t2) overlap = true;
      const claim = tracer.calls.filter((c) => c.start < fillAt);
      nCalls.push(claim.length);
      engineMs.push(claim.reduce((a, c) => a + c.ms, 0));
      ready.push(tracer.waitReady.filter((w) => w.start < fillAt).reduce((a, w) => a + w.ms, 0));
      kinds = {};
      for (const c of claim) kinds[c.what] = (kinds[c.what] ?? 0) + 1;
      made.push(sbx);
    }
    log(`warm: ${WARM_RUNS} claims done`);
    const held: number[] = [];
    const heldFirst: number[] = [];
    const fill = provider.fillWarmPool;
    for (let i = 0; i < WARM_DIAG_RUNS; i++) {
      await provider.fillWarmPool();
      provider.fillWarmPool = () => Promise.resolve(); // create()'s own refill: held back
      const t0 = now();
      const sbx = await provider.create({ language: "python", threadId: fresh() });
      const t1 = now();
      await runTrue(sbx);
      const t2 = now();
      provider.fillWarmPool = fill;
      held.push(t2 - t0);
      heldFirst.push(t2 - t1);
      made.push(sbx);
    }
    log(`warm: ${WARM_DIAG_RUNS} claims with the refill held back done`);
    await provider.fillWarmPool();
    for (const s of [...made, ref]) await s.kill();
    return {
      oursMs: summarize(ours),
      oursP95Ms: p95(ours),
      floorMs: summarize(floor),
      floorP95Ms: p95(floor),
      createOnlyMs: summarize(createOnly),
      claimEngineCalls: median(nCalls),
      claimEngineCallKinds: kinds,
      claimEngineMsP50: median(engineMs),
      claimWaitReadyMsP50: median(ready),
      firstCommandMsP50: median(firstCmd),
      refillOverlapsTimedWindow: overlap,
      refillHeldMs: summarize(held),
      refillHeldFirstCommandMs: summarize(heldFirst),
    };
  } finally {
    await provider.close();
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Round trip

interface RttResult {
  roundTripMs: Summary;
  execFloorMs: Summary;
  /** Reference: the same round trip with network: false (sandboxd over a unix socket). */
  roundTripUnixSocketMs: Summary | null;
  unixSocketError?: string;
}

async function roundTrips(sbx: SandboxInstance): Promise<Summary> {
  const samples: number[] = [];
  for (let i = 0; i < RTT_WARMUP + RTT_RUNS; i++) {
    const t = now();
    await runTrue(sbx);
    if (i >= RTT_WARMUP) samples.push(now() - t);
  }
  return summarize(samples);
}

async function benchRtt(): Promise<RttResult> {
  const provider = newProvider("rtt", 38500);
  let roundTripMs: Summary;
  let execFloorMs: Summary;
  try {
    const sbx = await provider.create({ language: "python", threadId: fresh() });
    roundTripMs = await roundTrips(sbx);
    log(`rtt: ${RTT_RUNS} round trips done`);
    const exec: number[] = [];
    for (let i = 0; i < EXEC_FLOOR_RUNS + 3; i++) {
      const t = now();
      await docker(["exec", sbx.sandboxId, "true"]);
      if (i >= 3) exec.push(now() - t);
    }
    execFloorMs = summarize(exec);
    log(`rtt: ${EXEC_FLOOR_RUNS} docker exec done`);
    await sbx.kill();
  } finally {
    await provider.close();
  }
  const uds = newProvider("rtt-uds", 38600, { network: false });
  try {
    const sbx = await uds.create({ language: "python", threadId: fresh() });
    const r = await roundTrips(sbx);
    await sbx.kill();
    log(`rtt: ${RTT_RUNS} unix-socket round trips done`);
    return { roundTripMs, execFloorMs, roundTripUnixSocketMs: r };
  } catch (err) {
    return { roundTripMs, execFloorMs, roundTripUnixSocketMs: null, unixSocketError: String(err) };
  } finally {
    await uds.close();
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Concurrent creates

interface ConcurrentRun {
  /** How the creates were spread over providers. */
  setup: string;
  n: number;
  ok: number;
  /** Distinct error messages of failed creates (each with its count). */
  errors: Record<string, number>;
  /** Promise.all of all creates (+ first command), settled. */
  wallMs: number;
  /** Successful creates only. */
  perCreateMs: Summary | null;
  engineCalls: number;
  engineCallKinds: Record<string, number>;
  /** Volumes of this section left behind after the failed creates (before the final cleanup). */
  leakedVolumes: number;
  /** p50 / max duration of one engine call of each kind, ms, and of waitReady. */
  callMs: Record<string, { p50: number; max: number }>;
}

interface ConcurrentResult {
  /** Reference: 20 floor commands (`docker run --rm --entrypoint /bin/true`) at once, wall ms. */
  floorWallMs: number;
  /** As specified: one provider, 20 threads at once. */
  oneProvider: ConcurrentRun;
  /** The same, but each create through its own provider with its own basePort (no port race). */
  providerPerCreate: ConcurrentRun;
}

async function concurrentRun(
  setup: string,
  section: string,
  providers: DockerProvider[],
): Promise<ConcurrentRun> {
  const tracers = await Promise.all(providers.map((p) => instrument(p)));
  const made: SandboxInstance[] = [];
  try {
    // Untimed: engine detection and the first image check of every provider.
    await Promise.all(providers.map((p) => p.runtime()));
    const w = await providers[0]!.create({ language: "python", threadId: fresh() });
    await w.kill();
    for (const t of tracers) t.reset();
    const t0 = now();
    const settled = await Promise.allSettled(
      Array.from({ length: CONCURRENT }, async (_, i) => {
        const t = now();
        const sbx = await providers[i % providers.length]!.create({
          language: "python",
          threadId: fresh(),
        });
        made.push(sbx);
        await runTrue(sbx);
        return now() - t;
      }),
    );
    const wallMs = now() - t0;
    const per = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    const errors: Record<string, number> = {};
    for (const s of settled) {
      if (s.status === "rejected") {
        const msg = (s.reason instanceof Error ? s.reason.message : String(s.reason))
          .replace(/sandpit-bench-[a-z0-9-]+/g, "<name>")
          .replace(/\(tried [^)]*\)/, "(tried …)");
        errors[msg] = (errors[msg] ?? 0) + 1;
      }
    }
    const calls = tracers.flatMap((t) => t.calls);
    const kinds: Record<string, number> = {};
    for (const c of calls) kinds[c.what] = (kinds[c.what] ?? 0) + 1;
    const callMs: Record<string, { p50: number; max: number }> = {};
    const durations = [
      ...calls.map((c) => [c.what, c.ms] as const),
      ...tracers.flatMap((t) => t.waitReady.map((w) => ["waitReady", w.ms] as const)),
    ];
    for (const k of new Set(durations.map(([what]) => what))) {
      const v = summarize(durations.filter(([what]) => what === k).map(([, ms]) => ms));
      callMs[k] = { p50: v.p50, max: v.max };
    }
    await Promise.allSettled(made.splice(0).map((s) => s.kill()));
    const leaked = (
      await run("docker", ["volume", "ls", "-q", "--filter", `name=${PREFIX}${section}`])
    ).stdout
      .split("\n")
      .filter((v) => v.startsWith(`${PREFIX}${section}`)).length;
    log(`concurrent (${setup}): ${per.length}/${CONCURRENT} ok in ${wallMs.toFixed(0)} ms`);
    return {
      setup,
      n: CONCURRENT,
      ok: per.length,
      errors,
      wallMs,
      perCreateMs: per.length ? summarize(per) : null,
      engineCalls: calls.length,
      engineCallKinds: kinds,
      leakedVolumes: leaked,
      callMs,
    };
  } finally {
    await Promise.allSettled(made.map((s) => s.kill()));
    await Promise.all(providers.map((p) => p.close()));
  }
}

async function benchConcurrent(): Promise<ConcurrentResult> {
  const oneProvider = await concurrentRun("one provider", "conc", [newProvider("conc", 38700)]);
  const providerPerCreate = await concurrentRun(
    "one provider per create, basePorts 50 apart",
    "conc-sep",
    Array.from({ length: CONCURRENT }, (_, i) => newProvider("conc-sep", 39000 + 50 * i)),
  );
  const t0 = now();
  await Promise.all(Array.from({ length: CONCURRENT }, () => docker(FLOOR_ARGS)));
  const floorWallMs = now() - t0;
  log(`concurrent: ${CONCURRENT} floor commands in ${floorWallMs.toFixed(0)} ms`);
  return { floorWallMs, oneProvider, providerPerCreate };
}

// ---------------------------------------------------------------------------------------------
// 5. The peer: llm-sandbox

interface PeerResult {
  ok: boolean;
  error?: string;
  version?: string;
  dockerPy?: string;
  theirsMs?: Summary;
  theirsOpenMs?: Summary;
  theirsRunMs?: Summary;
  oursMs?: Summary;
  oursCreateOnlyMs?: Summary;
  /** ours.p50 / theirs.p50 */
  ratioP50?: number;
}

/** bench.py over stdin/stdout: one JSON line per request. */
class Peer {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly lines: AsyncIterator<string>;
  private readonly exited: Promise<never>;
  constructor() {
    this.child = spawn(PEER_PYTHON, [join(PEER_DIR, "bench.py"), "--image", IMAGE], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.child.stderr.on("data", (d: Buffer) => process.stderr.write(d));
    this.lines = createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
    this.exited = new Promise<never>((_, reject) =>
      this.child.once("exit", (code) =>
        reject(new Error(`llm-sandbox bench.py exited with ${code}`)),
      ),
    );
    this.exited.catch(() => undefined);
  }
  async next(timeoutMs = 120_000): Promise<Record<string, unknown>> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`llm-sandbox bench.py gave no answer in ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      const r = await Promise.race([this.lines.next(), timeout, this.exited]);
      if (r.done) throw new Error("llm-sandbox bench.py closed its output");
      const msg = JSON.parse(r.value) as Record<string, unknown>;
      if (typeof msg.error === "string") throw new Error(`llm-sandbox: ${msg.error}`);
      return msg;
    } finally {
      clearTimeout(timer);
    }
  }
  async run(name: string): Promise<{ ms: number; openMs: number; runMs: number }> {
    this.child.stdin.write(`run ${name}\n`);
    return (await this.next()) as { ms: number; openMs: number; runMs: number };
  }
  async close(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((r) => this.child.once("exit", r));
    this.child.stdin.end("quit\n");
    const t = setTimeout(() => this.child.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(t);
  }
}

async function benchPeer(): Promise<PeerResult> {
  if (!existsSync(PEER_PYTHON))
    return {
      ok: false,
      // Named by its path in the repository: the result is committed.
      error: `bench/src/llm-sandbox/.venv/bin/python is missing: python3 -m venv bench/src/llm-sandbox/.venv && bench/src/llm-sandbox/.venv/bin/pip install -r bench/src/llm-sandbox/requirements.txt`,
    };
  const peer = new Peer();
  const provider = newProvider("peer", 38900);
  try {
    const hello = await peer.next();
    const theirs: { ms: number; openMs: number; runMs: number }[] = [];
    const ours: number[] = [];
    const oursCreate: number[] = [];
    const measureOurs = async (timed: boolean) => {
      const t0 = now();
      const sbx = await provider.create({ language: "python", threadId: fresh() });
      const t1 = now();
      const r = await sbx.executeCode("print(1)", "python");
      const t2 = now();
      if (!r.success || r.stdout.trim() !== "1")
        throw new Error(`executeCode("print(1)") gave ${JSON.stringify(r)}`);
      if (timed) {
        ours.push(t2 - t0);
        oursCreate.push(t1 - t0);
      }
      await sbx.kill();
    };
    let n = 0;
    const measureTheirs = async (timed: boolean) => {
      const r = await peer.run(`${PREFIX}llmsb-${process.pid}-${n++}`);
      if (timed) theirs.push(r);
    };
    // One untimed warm-up each (imports, first image lookups).
    await measureTheirs(false);
    await measureOurs(false);
    for (let i = 0; i < PEER_RUNS; i++) {
      if (i % 2 === 0) {
        await measureOurs(true);
        await measureTheirs(true);
      } else {
        await measureTheirs(true);
        await measureOurs(true);
      }
    }
    log(`peer: ${PEER_RUNS} x2 done`);
    const theirsMs = summarize(theirs.map((t) => t.ms));
    const oursMs = summarize(ours);
    return {
      ok: true,
      version: String(hello.version),
      dockerPy: String(hello.docker),
      theirsMs,
      theirsOpenMs: summarize(theirs.map((t) => t.openMs)),
      theirsRunMs: summarize(theirs.map((t) => t.runMs)),
      oursMs,
      oursCreateOnlyMs: summarize(oursCreate),
      ratioP50: oursMs.p50 / theirsMs.p50,
    };
  } catch (err) {
    return { ok: false, error: err instanceof Error ? err.message : String(err) };
  } finally {
    await peer.close().catch(() => undefined);
    await provider.close();
  }
}

// ---------------------------------------------------------------------------------------------

/** Removes every container and volume whose name starts with PREFIX. */
async function cleanup(): Promise<void> {
  const names = async (args: string[]) =>
    (await run("docker", args, { timeout: 60_000 })).stdout
      .split("\n")
      .map((s) => s.trim())
      .filter((s) => s.startsWith(PREFIX));
  try {
    const containers = await names([
      "ps",
      "-a",
      "--filter",
      `name=${PREFIX}`,
      "--format",
      "{{.Names}}",
    ]);
    if (containers.length)
      await run("docker", ["rm", "-f", "-v", ...containers], { timeout: 120_000 });
    const volumes = await names(["volume", "ls", "-q", "--filter", `name=${PREFIX}`]);
    if (volumes.length)
      await run("docker", ["volume", "rm", "-f", ...volumes], { timeout: 120_000 });
    log(`cleanup: removed ${containers.length} containers, ${volumes.length} volumes`);
  } catch (err) {
    log(`cleanup failed: ${String(err)}`);
  }
}

async function machineInfo() {
  const version = JSON.parse(
    (await run("docker", ["version", "--format", "{{json .}}"])).stdout,
  ) as {
    Client?: { Version?: string };
    Server?: { Version?: string; KernelVersion?: string; Os?: string; Arch?: string };
  };
  const img = JSON.parse((await run("docker", ["image", "inspect", IMAGE])).stdout) as {
    Id: string;
    RepoTags: string[];
    Size: number;
  }[];
  const info = JSON.parse((await run("docker", ["info", "--format", "{{json .}}"])).stdout) as {
    Driver?: string;
    CgroupVersion?: string;
    NCPU?: number;
    MemTotal?: number;
  };
  return {
    ...hostInfo(),
    docker: {
      client: version.Client?.Version ?? null,
      server: version.Server?.Version ?? null,
      storageDriver: info.Driver ?? null,
      cgroupVersion: info.CgroupVersion ?? null,
      engineCpus: info.NCPU ?? null,
      engineMemBytes: info.MemTotal ?? null,
    },
    image: {
      tag: IMAGE,
      contentTag: img[0]?.RepoTags.find((t) => t !== IMAGE) ?? null,
      id: img[0]?.Id ?? null,
      sizeBytes: img[0]?.Size ?? null,
    },
  };
}

const f = (v: number, d = 1) => v.toFixed(d);
const p3 = (s: Summary, p95v: number) =>
  `${f(s.p50)} / ${f(p95v)} / ${f(s.p99)} ms (p50 / p95 / p99)`;

/** Issue 17's rows, for the headline table (`npm run bench`). */
function coldHeadline(c: ColdResult): HeadlineRow {
  return {
    metric: "Docker cold create → first command / `docker run --rm img true`",
    value: `${f(c.oursMs.p50)} / ${f(c.oursMs.p99)} ms (p50 / p99)`,
    floor: `${f(c.floorMs.p50)} / ${f(c.floorMs.p99)} ms (p50 / p99)`,
    ratio: c.ratioP50,
    goal: `≤ ${GOAL_COLD_RATIO}x`,
    met: c.ratioP50 <= GOAL_COLD_RATIO,
  };
}

function warmHeadline(w: WarmResult): HeadlineRow {
  return {
    metric: "Docker warm acquire → first command",
    value: p3(w.oursMs, w.oursP95Ms),
    floor: `${p3(w.floorMs, w.floorP95Ms)}: run("true") on a running sandbox`,
    ratio: w.oursMs.p50 / w.floorMs.p50,
    goal: `p50 ≤ ${GOAL_WARM_P50_MS} ms`,
    met: w.oursMs.p50 <= GOAL_WARM_P50_MS,
  };
}
const pp = (s: Summary, d = 1) => `${f(s.p50, d)} / ${f(s.p99, d)}`;
const verdict = (ok: boolean) => (ok ? "met" : "**missed**");

interface Results {
  cold: ColdResult;
  warm: WarmResult;
  rtt: RttResult;
  concurrent: ConcurrentResult;
  peer: PeerResult;
}

function table(r: Results): string {
  const rows: [string, string, string][] = [
    [`cold create → first \`true\` done, p50 / p99 (ms, N=${COLD_RUNS})`, pp(r.cold.oursMs), ""],
    ["… of which `create()` alone, p50 (ms)", f(r.cold.createOnlyMs.p50), ""],
    [
      `floor: \`docker ${FLOOR_ARGS.join(" ")}\`, p50 / p99 (ms, N=${COLD_RUNS})`,
      pp(r.cold.floorMs),
      "",
    ],
    [
      "cold / floor, p50",
      `${r.cold.ratioP50.toFixed(2)}x (${verdict(r.cold.ratioP50 <= GOAL_COLD_RATIO)})`,
      `≤ ${GOAL_COLD_RATIO}x`,
    ],
    [
      `warm-pool acquire → first \`true\` done, p50 / p99 (ms, N=${WARM_RUNS})`,
      `${pp(r.warm.oursMs)} (${verdict(r.warm.oursMs.p50 <= GOAL_WARM_P50_MS)})`,
      `p50 ≤ ${GOAL_WARM_P50_MS} ms`,
    ],
    [
      'floor: `run("true")` on an already running sandbox, same run, p50 / p99 (ms)',
      pp(r.warm.floorMs),
      "",
    ],
    ["warm acquire / floor, p50", `${(r.warm.oursMs.p50 / r.warm.floorMs.p50).toFixed(2)}x`, ""],
    ["… of which `create()` alone, p50 (ms)", f(r.warm.createOnlyMs.p50), ""],
    [
      `diagnostic: the same with create()'s background refill held until the first command is done, p50 / p99 (ms, N=${WARM_DIAG_RUNS})`,
      pp(r.warm.refillHeldMs),
      "",
    ],
    [
      `\`commands.run("true")\` round trip, p50 / p99 (ms, N=${RTT_RUNS})`,
      `${pp(r.rtt.roundTripMs, 2)} (${verdict(r.rtt.roundTripMs.p50 <= GOAL_RTT_P50_MS)})`,
      `p50 ≤ ${GOAL_RTT_P50_MS} ms`,
    ],
    [
      "reference: the same with `network: false` (unix socket), p50 / p99 (ms)",
      r.rtt.roundTripUnixSocketMs
        ? pp(r.rtt.roundTripUnixSocketMs, 2)
        : `failed: ${r.rtt.unixSocketError}`,
      "",
    ],
    [
      `reference: \`docker exec <container> true\`, p50 / p99 (ms, N=${EXEC_FLOOR_RUNS})`,
      pp(r.rtt.execFloorMs),
      "",
    ],
    ...[r.concurrent.oneProvider, r.concurrent.providerPerCreate].flatMap(
      (c): [string, string, string][] => [
        [
          `${CONCURRENT} concurrent creates + first \`true\` (${c.setup}): succeeded; wall time (ms)`,
          `${c.ok}/${c.n}; ${f(c.wallMs, 0)}`,
          "",
        ],
        ["… per successful create, p50 / p99 (ms)", c.perCreateMs ? pp(c.perCreateMs, 0) : "-", ""],
      ],
    ),
    [
      `reference: ${CONCURRENT} concurrent floor commands, wall time (ms)`,
      f(r.concurrent.floorWallMs, 0),
      "",
    ],
  ];
  if (r.peer.ok) {
    rows.push(
      [
        `llm-sandbox ${r.peer.version} (Docker): create → first \`run("print(1)")\`, p50 / p99 (ms, N=${PEER_RUNS})`,
        pp(r.peer.theirsMs!),
        "",
      ],
      ["… of which `open()`, p50 (ms)", f(r.peer.theirsOpenMs!.p50), ""],
      [
        `ours: create → first \`executeCode("print(1)")\`, p50 / p99 (ms, N=${PEER_RUNS})`,
        pp(r.peer.oursMs!),
        "",
      ],
      ["ours / llm-sandbox, p50", `${r.peer.ratioP50!.toFixed(2)}x`, ""],
    );
  } else {
    rows.push(["llm-sandbox (Docker)", `failed: ${r.peer.error}`, ""]);
  }
  return [
    "| Metric | Docker provider | Goal |",
    "|---|---:|---|",
    ...rows.map(([a, b, c]) => `| ${a} | ${b} | ${c} |`),
  ].join("\n");
}

async function main(): Promise<void> {
  const started = new Date();
  await ensureDocker({ log });
  const probe = spawnSync("docker", ["image", "inspect", IMAGE], { stdio: "ignore" });
  if (probe.status !== 0)
    throw new Error(`${IMAGE} is not present: build it with \`node images/build.ts\``);
  const machine = await machineInfo();
  await cleanup(); // leftovers of an earlier, interrupted run
  if (process.argv.includes("--only=warm")) {
    // The warm section alone (issue 17's warm-acquire row), printed, no results file written.
    try {
      const w = await benchWarm();
      process.stdout.write(
        JSON.stringify({ warm: w, headline: [warmHeadline(w)] }, null, 2) + "\n",
      );
    } finally {
      await cleanup();
    }
    return;
  }
  let results: Results;
  try {
    log("1/5 cold create");
    const cold = await benchCold();
    log("2/5 warm pool");
    const warm = await benchWarm();
    log("3/5 round trip");
    const rtt = await benchRtt();
    log("4/5 concurrent creates");
    const concurrent = await benchConcurrent();
    log("5/5 llm-sandbox");
    const peer = await benchPeer();
    results = { cold, warm, rtt, concurrent, peer };
  } finally {
    await cleanup();
  }
  const elapsedS = (Date.now() - started.getTime()) / 1000;
  const commit = commitMeasured();

  const md = table(results);
  const b = results.cold.breakdownP50;
  process.stdout.write(
    `## Docker provider (${started.toISOString()})\n\n` +
      `Machine: ${machine.cpus} CPUs (${machine.cpuModel}), ${(machine.totalMemBytes / 2 ** 30).toFixed(1)} GiB RAM, ` +
      `Node ${machine.node}, ${machine.platform}, Docker ${machine.docker.server} (${machine.docker.storageDriver}, cgroup v${machine.docker.cgroupVersion}). ` +
      `Image ${IMAGE} = ${machine.image.contentTag} (${((machine.image.sizeBytes ?? 0) / 1e6).toFixed(0)} MB). ` +
      `Commit ${commit ?? "unknown"}. Run took ${elapsedS.toFixed(0)} s.\n\n` +
      `${md}\n\n` +
      `Cold create breakdown, medians (ms): ${Object.entries(b)
        .map(([k, v]) => `${k} ${f(v)}`)
        .join("; ")}; engine API calls per create: ${results.cold.engineCallsPerCreate}.\n` +
      `Readiness (${results.cold.readiness.runs} diagnostic creates, 2 ms /healthz polls): start returned → healthy p50 ${f(results.cold.readiness.startedToHealthyMs.p50)} ms; ` +
      `healthy → waitReady returned p50 ${f(results.cold.readiness.healthyToWaitReadyReturnMs.p50)} ms (p99 ${f(results.cold.readiness.healthyToWaitReadyReturnMs.p99)}).\n` +
      `Warm claim: ${results.warm.claimEngineCalls} engine API calls before the refill starts (${JSON.stringify(results.warm.claimEngineCallKinds)}), ` +
      `${f(results.warm.claimEngineMsP50)} ms of engine time, waitReady ${f(results.warm.claimWaitReadyMsP50)} ms, first command ${f(results.warm.firstCommandMsP50)} ms (medians); ` +
      `background refill overlapped the timed window: ${results.warm.refillOverlapsTimedWindow}.\n` +
      [results.concurrent.oneProvider, results.concurrent.providerPerCreate]
        .map(
          (c) =>
            `Concurrent (${c.setup}): ${c.engineCalls} engine API calls (${JSON.stringify(c.engineCallKinds)}); ` +
            `errors ${JSON.stringify(c.errors)}; volumes left behind by failed creates: ${c.leakedVolumes}; ` +
            `per-call ms p50/max: ${Object.entries(c.callMs)
              .map(([k, v]) => `${k} ${f(v.p50)}/${f(v.max)}`)
              .join(", ")}.\n`,
        )
        .join(""),
  );

  await writeResults(RESULTS_FILE, {
    date: started.toISOString(),
    commit,
    elapsedS,
    machine,
    parameters: {
      image: IMAGE,
      floorCommand: `docker ${FLOOR_ARGS.join(" ")}`,
      execFloorCommand: "docker exec <container> true",
      coldRuns: COLD_RUNS,
      diagnosticRuns: DIAG_RUNS,
      warmRuns: WARM_RUNS,
      rttWarmup: RTT_WARMUP,
      rttRuns: RTT_RUNS,
      execFloorRuns: EXEC_FLOOR_RUNS,
      concurrent: CONCURRENT,
      peerRuns: PEER_RUNS,
      percentiles: "nearest-rank",
    },
    goals: {
      coldOverFloorP50: GOAL_COLD_RATIO,
      warmAcquireP50Ms: GOAL_WARM_P50_MS,
      roundTripP50Ms: GOAL_RTT_P50_MS,
    },
    headline: [coldHeadline(results.cold), warmHeadline(results.warm)],
    results,
  });
  log(`wrote ${RESULTS_FILE}`);
}

await main();
