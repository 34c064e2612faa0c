/**
 * Operator benchmark on the local cluster (test/cluster): what a Sandbox costs in time, API
 * writes and operator memory, each against the cheapest way of doing the same without it.
 *
 *   1. floor: a bare Pod of the operator's own pod shape (emptyDir instead of the PVC),
 *      created → Running, 20 one after another;
 *   2. cold Sandbox (no pool) created → Ready, 20 one after another, and its ratio to the floor;
 *   3. warm adoption from a SandboxPool (warm 3), 30 samples, each one an adoption;
 *   4. API writes per sandbox, by resource and verb, from the operator's
 *      sandpit_api_writes_total (events and lease renewals apart, warm replenishment apart);
 *   5. 200 Sandboxes created at once, until all are Ready;
 *   6. the memory of a second operator process holding 1,000 Sandboxes whose pods run on a
 *      fake (kwok) node.
 *
 *   node_modules/.bin/node bench/src/operator.ts     (as root; brings the cluster up when it is
 *   not, and leaves it running; prints a summary, writes bench/results/operator.json and its
 *   section of bench/RESULTS.md; about 30 min)
 *   node_modules/.bin/node bench/src/operator.ts --report   (the section again from the JSON)
 */
import { execFile } from "node:child_process";
import { mkdir, readFile, readdir, rename, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { StorageV1Api } from "@kubernetes/client-node";
import { readConfig } from "@sandpit/operator";
import { LABEL, dataClaimName } from "@sandpit/operator/api";
import { Kube, type KObject, PODS, SECRETS } from "@sandpit/operator/kube/client";
import { pod as podManifest, tokenSecret } from "@sandpit/operator/workload/manifests";
import { effectiveSpec } from "@sandpit/operator/workload/spec";
import {
  type Clients,
  type OperatorProcess,
  clients,
  ensureCrds,
  pools,
  sandboxes,
  startOperator,
  waitFor,
} from "../../test/cluster/harness.ts";
import { CLUSTER_STATE } from "../../test/cluster/images.ts";
import { bundleForNode } from "../../images/build.ts";
import { SERVICE_ENV, SERVICE_NODE_FLAGS } from "../../images/service.ts";
import {
  ROOT,
  Tracker,
  benchNamespace,
  claimedBySandbox,
  clusterImage,
  clusterUp,
  deleteNamespaceAndWait,
  log,
  now,
  onInterrupt,
  podReady,
  podRunning,
  podsOnNode,
  sandboxPath,
  settleCpu,
  sleep,
  stopOperator,
  updateResultsMd,
} from "./kube.ts";
import { type HeadlineRow, commitMeasured, hostInfo, writeResults } from "./report.ts";
import { type Summary, summarize } from "./stats.ts";

const run = promisify(execFile);
const COMMAND = "node_modules/.bin/node bench/src/operator.ts";

/** SANDPIT_BENCH_SMOKE=1: a few samples of each part, to try the bench; nothing is written. */
const SMOKE = process.env.SANDPIT_BENCH_SMOKE === "1";
const FLOOR_PODS = SMOKE ? 2 : 20;
const COLD = SMOKE ? 2 : 20;
const WARM = SMOKE ? 4 : 30;
const WARM_ATTEMPTS = WARM + 15; // samples that turn out not to be adoptions are retried, this far
const BURST = SMOKE ? 5 : 200;
const SCALE = SMOKE ? 30 : 1000;
const SCALE_CONCURRENCY = 20;
/** How long a burst waits for the machine to be quiet before it starts. */
const SETTLE_MS = 180_000;
/** Fake nodes hand out pod addresses from a /21 each and take 2,000 pods: one per 1,800. */
const PODS_PER_FAKE_NODE = 1800;
/**
 * The pod sets an ephemeral-storage limit (default 2Gi) and no request, so the request is the
 * limit: 2Gi each, and the node's ~249 GiB of allocatable disk fits 124 sandboxes, not 200. The
 * burst's sandboxes ask for less, as the harness's 10m CPU request does for CPU.
 */
const BURST_EPHEMERAL = "512Mi";
const BURST_SPEC = { resources: { ephemeralStorage: BURST_EPHEMERAL } };
const POOL = "pool";
const WFFC_CLASS = "sandpit-bench-wffc";
const KWOK_SELECTOR = '{"type":"kwok"}';
const KWOK_TOLERATIONS = '[{"key":"kwok.x-k8s.io/node","operator":"Exists","effect":"NoSchedule"}]';
/** What the harness gives the operator, repeated so the floor pod is built from the same settings. */
const OPERATOR_ENV = { SANDPIT_CPU_REQUEST: "10m", SANDPIT_IMAGE_PULL_POLICY: "IfNotPresent" };
/**
 * The burst alone (`--burst-only`) asks 5m of CPU per pod, bare or not: at 10m, 200 pods take the
 * node's whole 2 cores of requests, and with the chart's own pods installed about 60 of them stay
 * Pending (Insufficient cpu), as a first run showed.
 */
const BURST_ENV = { ...OPERATOR_ENV, SANDPIT_CPU_REQUEST: "5m" };

// ---------------------------------------------------------------------------------------------
// The operator's own numbers.

type Counts = Record<string, number>;

/** sandpit_api_writes_total as "resource VERB" → count. */
function writesOf(metrics: string): Counts {
  const out: Counts = {};
  for (const line of metrics.split("\n")) {
    if (!line.startsWith("sandpit_api_writes_total{")) continue;
    const resource = /resource="([^"]*)"/.exec(line)?.[1];
    const verb = /verb="([^"]*)"/.exec(line)?.[1];
    out[`${resource} ${verb}`] = Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return out;
}

function gauge(metrics: string, name: string): number {
  const line = metrics
    .split("\n")
    .find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : NaN;
}

/** V8's heap spaces, used MiB by space (from prom-client's default metrics). */
function heapSpaces(metrics: string): Counts {
  const out: Counts = {};
  for (const line of metrics.split("\n")) {
    if (!line.startsWith("nodejs_heap_space_size_used_bytes{")) continue;
    const space = /space="([^"]*)"/.exec(line)?.[1] ?? "?";
    out[space] = Math.round(Number(line.slice(line.lastIndexOf(" ") + 1)) / 2 ** 20);
  }
  return out;
}

/** "used/committed" MiB of one V8 heap space. */
function spaceUse(metrics: string, space: string): string {
  const of = (name: string) => Math.round(gauge(metrics, `${name}{space="${space}"}`) / 2 ** 20);
  return `${of("nodejs_heap_space_size_used_bytes")}/${of("nodejs_heap_space_size_total_bytes")}`;
}

function diff(after: Counts, before: Counts): Counts {
  const out: Counts = {};
  for (const k of Object.keys(after)) {
    const d = after[k]! - (before[k] ?? 0);
    if (d) out[k] = d;
  }
  return out;
}

const sum = (c: Counts, filter: (key: string) => boolean = () => true) =>
  Object.entries(c)
    .filter(([k]) => filter(k))
    .reduce((a, [, v]) => a + v, 0);
const isEvent = (k: string) => k.startsWith("events ");
const isLease = (k: string) => k.startsWith("leases ");
const isPool = (k: string) => k.startsWith("sandboxpools");

async function procStatus(pid: number): Promise<{ rssMiB: number; hwmMiB: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1]);
  return { rssMiB: kib("VmRSS") / 1024, hwmMiB: kib("VmHWM") / 1024 };
}

/** User + system CPU seconds of a process. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ)
}

/**
 * CPU seconds each of the test cluster's own processes (API server, etcd, kubelet, kube-router,
 * ...: the pid files the cluster keeps) has used so far; its containers' processes are not
 * among them. Read before and after each side of the burst: where the machine's time went.
 */
async function clusterCpu(): Promise<Record<string, number>> {
  const dir = join(CLUSTER_STATE, "pids");
  const out: Record<string, number> = {};
  for (const name of (await readdir(dir).catch(() => [])).sort()) {
    const pid = Number((await readFile(join(dir, name), "utf8").catch(() => "")).trim());
    if (pid > 0) {
      const s = await cpuSeconds(pid).catch(() => undefined);
      if (s !== undefined) out[name] = s;
    }
  }
  return out;
}

/** What `f` returns, with the CPU seconds each cluster process used meanwhile (clusterCpuS). */
async function withClusterCpu<T extends object>(
  f: () => Promise<T>,
): Promise<T & { clusterCpuS: Record<string, number> }> {
  const before = await clusterCpu();
  const result = await f();
  const after = await clusterCpu();
  const clusterCpuS = Object.fromEntries(
    Object.entries(after)
      .filter(([k]) => before[k] !== undefined)
      .map(([k, v]) => [k, Math.round((v - before[k]!) * 10) / 10]),
  );
  return { ...result, clusterCpuS };
}

interface PhaseCost {
  samples: number;
  elapsedS: number;
  operatorCpuS: number;
  loadAvg1: number;
  /** All writes in the phase, "resource VERB" → total. */
  writes: Counts;
}

/** Waits until the operator has written nothing but lease renewals for 3 s (at most 60 s). */
async function settle(op: OperatorProcess): Promise<void> {
  let last = -1;
  let since = now();
  for (const until = now() + 60_000; now() < until; await sleep(250)) {
    const total = sum(writesOf(await op.metrics()), (k) => !isLease(k));
    if (total !== last) {
      last = total;
      since = now();
    } else if (now() - since >= 3_000) return;
  }
  log("the operator kept writing for 60 s; measuring anyway");
}

async function costOf(
  op: OperatorProcess,
  samples: number,
  body: () => Promise<void>,
): Promise<PhaseCost> {
  const pid = op.proc.pid!;
  await settle(op);
  const loadAvg1 = os.loadavg()[0]!;
  const before = writesOf(await op.metrics());
  const cpu0 = await cpuSeconds(pid);
  const t0 = now();
  await body();
  await settle(op);
  const writes = diff(writesOf(await op.metrics()), before);
  return {
    samples,
    elapsedS: (now() - t0) / 1000,
    operatorCpuS: (await cpuSeconds(pid)) - cpu0,
    loadAvg1,
    writes,
  };
}

/** Runs `f` on every item, at most `limit` at a time. */
async function eachLimited<T>(items: T[], limit: number, f: (item: T) => Promise<void>) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await f(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** `f`, tried again after 0.5, 1, 1.5 and 2 s when it fails (an API server busy in a burst). */
async function retried(f: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await f();
      return;
    } catch (err) {
      if (attempt >= 5) throw err;
      await sleep(500 * attempt);
    }
  }
}

/** Creates `names` at most `limit` at a time; returns when each create was issued. */
async function createAll(
  c: Clients,
  ns: string,
  names: string[],
  spec: Record<string, unknown>,
  limit: number,
): Promise<Map<string, number>> {
  const issued = new Map<string, number>();
  await eachLimited(names, limit, async (name) => {
    issued.set(name, now());
    await retried(() => sandboxes.create(c, ns, name, spec));
  });
  return issued;
}

async function deleteSandboxes(c: Clients, ns: string, names: string[]): Promise<void> {
  await eachLimited(names, 20, (name) =>
    sandboxes.delete(c, ns, name).then(
      () => undefined,
      () => undefined,
    ),
  );
}

/**
 * Waits (at most 15 min) until the `ready` mark holds for every name in `tracker`; how many did,
 * when the last did after `t0`, and each one's time from its create (`issued`).
 */
async function allReady(
  tracker: Tracker,
  names: string[],
  issued: Map<string, number>,
  t0: number,
  what: string,
) {
  let ready = 0;
  try {
    await tracker.until(`all ${names.length} ${what} Ready`, 15 * 60_000, () => {
      ready = names.filter((n) => tracker.at(n, "ready") !== undefined).length;
      return ready === names.length;
    });
  } catch (err) {
    log(`${what}: ${(err as Error).message} (${ready} Ready)`);
  }
  const at = names.flatMap((n) => {
    const t = tracker.at(n, "ready");
    return t === undefined ? [] : [{ t, sinceCreate: t - issued.get(n)! }];
  });
  return {
    ready,
    wallMs: Math.max(...at.map((x) => x.t)) - t0,
    perItem: summarize(at.map((x) => x.sinceCreate)),
  };
}

// ---------------------------------------------------------------------------------------------
// The measurements.

interface Main {
  c: Clients;
  kube: Kube;
  ns: string;
  op: OperatorProcess;
  pods: Tracker;
  sbx: Tracker;
  claims: Tracker;
  image: string;
  /** The operator's environment, which bare pods are built with too. */
  env: Record<string, string>;
}

/** Bare objects are built by the operator's own functions, then stripped of owner and labels. */
const NO_OWNER = { apiVersion: "v1", kind: "Namespace", metadata: { name: "none", uid: "0" } };

/**
 * The operator's pod for a Sandbox of `spec`, by name, exactly, but for its volume (an emptyDir
 * for the PVC) and its labels and owner (so the operator, which watches its own pods only, never
 * sees it).
 */
function barePods(
  m: Main,
  secret: string,
  sandboxSpec: Parameters<typeof effectiveSpec>[0],
): (name: string) => KObject {
  const cfg = readConfig({ ...m.env, SANDPIT_SANDBOX_IMAGE: m.image });
  const eff = effectiveSpec(sandboxSpec, undefined, cfg);
  return (name) => {
    const p = podManifest(
      { name, namespace: m.ns, owner: NO_OWNER, labels: {} },
      eff,
      {
        token: { secret },
        mounts: [{ claimName: "none", mountPath: "/mnt/user-data", readOnly: false }],
      },
      cfg,
    );
    p.metadata = { name, namespace: m.ns, labels: { app: "sandpit-bench-floor" } };
    const spec = p.spec as { volumes: { name: string }[] };
    spec.volumes = spec.volumes.map((v) =>
      v.name === "data" ? { name: "data", emptyDir: {} } : v,
    );
    return p as KObject;
  };
}

/** The token Secret bare pods read (the operator's pods take their token's digest from one). */
async function floorSecret(m: Main, secret: string): Promise<void> {
  const s = tokenSecret(
    { name: secret, namespace: m.ns, owner: NO_OWNER, labels: {} },
    "f".repeat(64),
  );
  s.metadata = { name: secret, namespace: m.ns };
  await m.kube.create(SECRETS, s);
}

async function floor(m: Main) {
  const secret = "floor-token";
  await floorSecret(m, secret);
  const manifest = barePods(m, secret, {});
  const running: number[] = [];
  const serving: number[] = [];
  const ready: number[] = [];
  const cost = await costOf(m.op, FLOOR_PODS, async () => {
    for (let i = 0; i < FLOOR_PODS; i++) {
      const name = `floor-${i}`;
      const t0 = now();
      await m.kube.create(PODS, manifest(name));
      running.push((await m.pods.waitMark(name, "running", 120_000)) - t0);
      // Reference: when sandboxd in it answers, polled from the node every 10 ms.
      const ip = m.pods.objects.get(name)?.status?.podIP as string | undefined;
      if (ip) {
        for (const until = now() + 30_000; now() < until; await sleep(10)) {
          const ok = await fetch(`http://${ip}:8080/healthz`, { signal: AbortSignal.timeout(1000) })
            .then((r) => r.ok)
            .catch(() => false);
          if (ok) {
            serving.push(now() - t0);
            break;
          }
        }
      }
      ready.push((await m.pods.waitMark(name, "ready", 60_000)) - t0);
      await m.kube.delete(PODS, m.ns, name);
      await m.pods.waitMark(name, "deleted", 120_000);
    }
  });
  await m.kube.delete(SECRETS, m.ns, secret);
  return {
    running: summarize(running),
    serving: summarize(serving),
    kubeletReady: summarize(ready),
    cost,
  };
}

async function cold(m: Main, count = COLD) {
  // The namespace's first sandbox also makes the namespace's shared network policies (once per
  // namespace and network): its writes are counted apart from the sandboxes' own.
  const first = await costOf(m.op, 1, async () => {
    await sandboxes.create(m.c, m.ns, "cold-first", {});
    await m.sbx.waitMark("cold-first", "ready", 120_000);
  });
  const names = Array.from({ length: count }, (_, i) => `cold-${i}`);
  const ready: number[] = [];
  const bound: number[] = [];
  const podSeen: number[] = [];
  const podRunningAt: number[] = [];
  const stored: number[] = [];
  const cost = await costOf(m.op, count, async () => {
    for (const name of names) {
      const t0 = now();
      await sandboxes.create(m.c, m.ns, name, {});
      ready.push((await m.sbx.waitMark(name, "ready", 120_000)) - t0);
      stored.push(m.sbx.at(name, "seen")! - t0);
      const b = m.claims.at(dataClaimName(name), "bound");
      if (b) bound.push(b - t0);
      const s = m.pods.at(name, "seen");
      if (s) podSeen.push(s - t0);
      const r = m.pods.at(name, "running");
      if (r) podRunningAt.push(r - t0);
    }
  });
  await removeAll(m, ["cold-first", ...names]);
  return {
    first,
    ready: summarize(ready),
    sandboxSeen: summarize(stored),
    claimBound: summarize(bound),
    podCreated: summarize(podSeen),
    podRunning: summarize(podRunningAt),
    cost,
  };
}

/** Deletes sandboxes and waits until no sandbox pod is left in the namespace. */
async function removeAll(m: Main, names: string[]): Promise<void> {
  await deleteSandboxes(m.c, m.ns, names);
  await m.pods.until("the sandboxes' pods gone", 5 * 60_000, () => m.pods.objects.size === 0);
  for (const n of names) m.sbx.forget(n);
}

async function warm(m: Main) {
  await pools.create(m.c, m.ns, POOL, { warm: 3, maxActive: 1000, template: {} });
  await waitFor("the pool's 3 warm pods ready", 180_000, async () => {
    const p = await pools.get(m.c, m.ns, POOL);
    return (p.status?.warmReady ?? 0) >= 3;
  });
  const claimable = () =>
    m.pods.live(
      (o) =>
        o.metadata.labels?.[LABEL.pool] === POOL &&
        o.metadata.labels?.[LABEL.warm] === "true" &&
        podReady(o),
    ).length;
  const ready: number[] = [];
  const waits: number[] = [];
  const notAdopted: string[] = [];
  const names: string[] = [];
  const stored: number[] = [];
  const podClaimed: number[] = [];
  const claimClaimed: number[] = [];
  let replenished = 0;
  let phaseStart = 0;
  const cost = await costOf(m.op, WARM, async () => {
    phaseStart = now();
    for (let i = 0; ready.length < WARM && i < WARM_ATTEMPTS; i++) {
      const name = `warm-${i}`;
      const w0 = now();
      // Every sample an adoption: the pool says a warm pod is ready, and the watch agrees.
      await waitFor(
        "a ready warm pod",
        180_000,
        async () =>
          ((await pools.get(m.c, m.ns, POOL)).status?.warmReady ?? 0) >= 1 && claimable() >= 1,
        20,
      );
      waits.push(now() - w0);
      const t0 = now();
      await sandboxes.create(m.c, m.ns, name, { poolRef: POOL });
      names.push(name);
      const at = await m.sbx.waitMark(name, "ready", 120_000);
      const podName = m.sbx.objects.get(name)?.status?.podName;
      if (podName && podName !== name && podName.startsWith(`${POOL}-`)) {
        ready.push(at - t0);
        stored.push(m.sbx.at(name, "seen")! - t0);
        const pc = m.pods.at(podName, "claimed");
        if (pc !== undefined) podClaimed.push(pc - t0);
        const cc = m.claims.at(dataClaimName(podName), "claimed");
        if (cc !== undefined) claimClaimed.push(cc - t0);
      } else notAdopted.push(`${name} (pod ${podName})`);
    }
    // The pool refills what was taken; the cost window closes once it has.
    await waitFor("the pool refilled", 180_000, async () => {
      const p = await pools.get(m.c, m.ns, POOL);
      return (p.status?.warmReady ?? 0) >= 3;
    });
  });
  // Warm pods created during the phase: each one is a PVC POST and a pod PATCH (apply).
  for (const p of m.pods.names()) {
    const seen = m.pods.at(p, "seen");
    if (p.startsWith(`${POOL}-`) && seen !== undefined && seen >= phaseStart) replenished++;
  }
  await pools.delete(m.c, m.ns, POOL);
  await removeAll(m, names);
  return {
    ready: summarize(ready),
    sandboxSeen: summarize(stored),
    podClaimed: summarize(podClaimed),
    claimClaimed: summarize(claimClaimed),
    waitForWarm: summarize(waits),
    notAdopted,
    replenishedPods: replenished,
    cost,
  };
}

/**
 * The burst's floor: `count` bare pods of the burst's sandbox shape (barePods) created at once, and
 * the time from the first create until the kubelet reports the last one Ready.
 */
async function bareBurst(m: Main, count: number) {
  const secret = "bare-burst-token";
  await floorSecret(m, secret);
  const names = Array.from({ length: count }, (_, i) => `bare-${String(i).padStart(3, "0")}`);
  const manifest = barePods(m, secret, BURST_SPEC);
  const issued = new Map<string, number>();
  const t0 = now();
  await eachLimited(names, count, async (name) => {
    issued.set(name, now());
    await retried(() => m.kube.create(PODS, manifest(name)));
  });
  log(`bare burst: ${count} creates accepted in ${(now() - t0).toFixed(0)} ms`);
  const { ready, wallMs, perItem } = await allReady(m.pods, names, issued, t0, "bare pods");
  const t1 = now();
  await eachLimited(names, 20, (name) => m.kube.delete(PODS, m.ns, name).catch(() => undefined));
  await m.pods.until("the bare pods gone", 5 * 60_000, () =>
    names.every((n) => !m.pods.objects.has(n)),
  );
  for (const n of names) m.pods.forget(n);
  await m.kube.delete(SECRETS, m.ns, secret);
  return { ready, wallMs, perPod: perItem, cleanupS: (now() - t1) / 1000 };
}

async function burst(m: Main, count = BURST) {
  const names = Array.from({ length: count }, (_, i) => `burst-${String(i).padStart(3, "0")}`);
  const otherPods = await podsOnNode(m.c, "sandpit-node");
  log(`burst: ${otherPods} other pods on the node before it`);
  let issued = new Map<string, number>();
  let done: Awaited<ReturnType<typeof allReady>> | undefined;
  const cost = await costOf(m.op, count, async () => {
    const t0 = now();
    issued = await createAll(m.c, m.ns, names, BURST_SPEC, count);
    const createdMs = now() - t0;
    log(`burst: ${count} creates accepted in ${createdMs.toFixed(0)} ms`);
    done = await allReady(m.sbx, names, issued, t0, "Sandboxes");
  });
  const { ready, wallMs, perItem } = done!;
  const running = names.flatMap((n) => {
    const at = m.pods.at(n, "running");
    return at === undefined ? [] : [at - issued.get(n)!];
  });
  const t0 = now();
  await removeAll(m, names);
  const cleanupS = (now() - t0) / 1000;
  return {
    ready,
    wallMs,
    perSandbox: perItem,
    podRunning: summarize(running),
    otherPodsOnNode: otherPods,
    cleanupS,
    cost,
  };
}

/**
 * Issue 17's burst: `count` bare pods of the sandboxes' shape at once (the floor), then `count`
 * cold Sandboxes at once, each after the machine has quietened; the ratio of the two times until
 * the last is Ready.
 */
async function burstAndFloor(m: Main, count: number) {
  const floorStart = await settleCpu(SETTLE_MS);
  log(`bare burst: ${count} pods at once (CPU ${(floorStart.cpuBusy * 100).toFixed(0)}% busy)`);
  const floor = await withClusterCpu(() => bareBurst(m, count));
  log(`bare burst: ${floor.ready} Ready, the last after ${(floor.wallMs / 1000).toFixed(1)} s`);
  const sandboxStart = await settleCpu(SETTLE_MS);
  log(`burst: ${count} Sandboxes at once (CPU ${(sandboxStart.cpuBusy * 100).toFixed(0)}% busy)`);
  const sandboxes = await withClusterCpu(() => burst(m, count));
  log(`burst: ${sandboxes.ready} Ready, the last after ${(sandboxes.wallMs / 1000).toFixed(1)} s`);
  return { count, floor, floorStart, sandboxes, sandboxStart };
}

/** The API server's PID and start time, to tell whether something restarted it meanwhile. */
async function apiServerIdentity(): Promise<string> {
  try {
    const pid = (await readFile(join(CLUSTER_STATE, "pids", "kube-apiserver"), "utf8")).trim();
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return `${pid}@${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}`;
  } catch {
    return "unknown";
  }
}

async function kwokRunning(): Promise<boolean> {
  try {
    const pid = (await readFile(join(CLUSTER_STATE, "pids", "kwok"), "utf8")).trim();
    process.kill(Number(pid), 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * The memory of an operator holding `count` Sandboxes on fake nodes. `maxMs` bounds the wait for
 * their pods: memory is read then even when fewer exist (the record says how many).
 */
/**
 * The operator as its image runs it: one esbuild bundle (images/service.ts), not the TypeScript
 * source, whose module graph and type stripping alone take ~65 MiB more. Written under
 * bench/dist/ (ignored by git); returns its path relative to the repository.
 */
async function operatorBundle(): Promise<string> {
  const entry = argument("--operator-entry");
  if (entry) return entry;
  const out = "bench/dist/operator.mjs";
  await mkdir(join(ROOT, "bench/dist"), { recursive: true });
  await writeFile(join(ROOT, out), await bundleForNode(join(ROOT, "operator/src/main.ts"), out));
  return out;
}

/** What the operator's image adds to its environment and its `node` command. */
const imageEnv = (): Record<string, string> => ({
  ...SERVICE_ENV.operator,
  ...(SERVICE_NODE_FLAGS.operator.length
    ? { NODE_OPTIONS: SERVICE_NODE_FLAGS.operator.join(" ") }
    : {}),
});

async function scale(
  c: Clients,
  kubeconfig: string,
  image: string,
  count = SCALE,
  maxMs = 25 * 60_000,
  operatorEnv: Record<string, string> = {},
) {
  const deadline = now() + maxMs;
  const left = (atMost: number) => Math.max(1_000, Math.min(atMost, deadline - now()));
  const storage = c.kc.makeApiClient(StorageV1Api);
  const kwokWasRunning = await kwokRunning();
  let ns: string | undefined;
  let op: OperatorProcess | undefined;
  let pods: Tracker | undefined;
  let madeClass = false;
  let sampler: NodeJS.Timeout | undefined;
  const series: {
    s: number;
    rssMiB: number;
    heapUsedMiB: number;
    heapTotalMiB: number;
    /** Used / committed MiB of the young generation (new space) and of old space. */
    newMiB: string;
    oldMiB: string;
    pods: number;
    running: number;
  }[] = [];
  const cleanup = async () => {
    clearInterval(sampler);
    pods?.stop();
    if (op) await stopOperator(op);
    if (ns) await deleteNamespaceAndWait(c, ns, 15 * 60_000);
    if (madeClass) await storage.deleteStorageClass({ name: WFFC_CLASS }).catch(() => undefined);
    if (!kwokWasRunning) {
      await run(join(ROOT, "test/cluster/kwok"), ["stop"], { timeout: 10 * 60_000 }).catch(
        (err: unknown) => log(`warning: kwok stop: ${(err as Error).message}`),
      );
    }
  };
  onInterrupt.add(cleanup);
  try {
    const nodes = String(Math.min(15, Math.ceil(count / PODS_PER_FAKE_NODE)));
    await run(join(ROOT, "test/cluster/kwok"), ["start", nodes], { timeout: 10 * 60_000 });
    // The default class binds at once, to a volume pinned to the real node, which a pod held to
    // the fake node could never use; this class lets the scheduler pick the node first.
    await storage
      .createStorageClass({
        body: {
          metadata: { name: WFFC_CLASS },
          provisioner: "sandpit.dev/host-path",
          reclaimPolicy: "Delete",
          volumeBindingMode: "WaitForFirstConsumer",
        },
      })
      .then(() => (madeClass = true))
      .catch((err: unknown) => {
        if ((err as { code?: number }).code !== 409) throw err;
      });
    ns = await benchNamespace(c, "bench-scale");
    const entry = await operatorBundle();
    op = await startOperator({
      kubeconfig,
      namespace: ns,
      image,
      entry,
      env: {
        ...OPERATOR_ENV,
        SANDPIT_POD_NODE_SELECTOR: KWOK_SELECTOR,
        SANDPIT_POD_TOLERATIONS: KWOK_TOLERATIONS,
        // The image's environment and the V8 flags of its command, as the image runs it
        // (--operator-env overrides).
        ...imageEnv(),
        ...operatorEnv,
        ...(HEAP_SNAPSHOT
          ? {
              NODE_OPTIONS: [
                operatorEnv.NODE_OPTIONS ?? imageEnv().NODE_OPTIONS ?? "",
                "--heapsnapshot-signal=SIGUSR2",
              ].join(" "),
            }
          : {}),
      },
    });
    const pid = op.proc.pid!;
    await sleep(5_000);
    const empty = {
      ...(await procStatus(pid)),
      heapUsedMiB: gauge(await op.metrics(), "nodejs_heap_size_used_bytes") / 2 ** 20,
    };
    log(`scale: operator RSS with 0 objects ${empty.rssMiB.toFixed(0)} MiB`);
    pods = new Tracker(c.kc, `/api/v1/namespaces/${ns}/pods`, { running: podRunning });
    await pods.start();
    const names = Array.from({ length: count }, (_, i) => `s-${String(i).padStart(5, "0")}`);
    const cpu0 = await cpuSeconds(pid);
    const t0 = now();
    const tracked = pods;
    const operator = op;
    sampler = setInterval(() => {
      void Promise.all([procStatus(pid), operator.metrics()])
        .then(([st, text]) =>
          series.push({
            s: Math.round((now() - t0) / 1000),
            rssMiB: Math.round(st.rssMiB),
            heapUsedMiB: Math.round(gauge(text, "nodejs_heap_size_used_bytes") / 2 ** 20),
            heapTotalMiB: Math.round(gauge(text, "nodejs_heap_size_total_bytes") / 2 ** 20),
            newMiB: spaceUse(text, "new"),
            oldMiB: spaceUse(text, "old"),
            pods: tracked.live().length,
            running: tracked.live(podRunning).length,
          }),
        )
        .catch(() => undefined);
    }, 5_000);
    await createAll(c, ns, names, { storage: { storageClassName: WFFC_CLASS } }, SCALE_CONCURRENCY);
    const createdS = (now() - t0) / 1000;
    log(`scale: ${count} Sandboxes created in ${createdS.toFixed(1)} s`);
    const p = pods;
    await p
      .until(`${count} pods`, left(20 * 60_000), () => p.live().length >= count)
      .catch((err: unknown) => log(`scale: ${(err as Error).message} (${p.live().length} pods)`));
    const podsS = (now() - t0) / 1000;
    log(`scale: ${p.live().length} pods exist after ${podsS.toFixed(1)} s`);
    let runningCount = 0;
    await p
      .until(`${count} pods Running`, left(5 * 60_000), () => {
        runningCount = p.live(podRunning).length;
        return runningCount >= count;
      })
      .catch((err: unknown) => log(`scale: ${(err as Error).message} (${runningCount} Running)`));
    const runningS = (now() - t0) / 1000;
    await sleep(15_000); // let the first burst of work pass before reading memory
    const metrics = await op.metrics();
    const full = {
      ...(await procStatus(pid)),
      heapUsedMiB: gauge(metrics, "nodejs_heap_size_used_bytes") / 2 ** 20,
      heapTotalMiB: gauge(metrics, "nodejs_heap_size_total_bytes") / 2 ** 20,
      externalMiB: gauge(metrics, "nodejs_external_memory_bytes") / 2 ** 20,
      heapSpacesMiB: heapSpaces(metrics),
    };
    const operatorCpuS = (await cpuSeconds(pid)) - cpu0;
    if (HEAP_SNAPSHOT) await heapSnapshot(pid, HEAP_SNAPSHOT);
    const phases: Counts = {};
    for (const s of await sandboxes.list(c, ns)) {
      const ph = s.status?.phase ?? "(none)";
      phases[ph] = (phases[ph] ?? 0) + 1;
    }
    log(
      `scale: RSS ${full.rssMiB.toFixed(0)} MiB (peak ${full.hwmMiB.toFixed(0)}), heap used ${full.heapUsedMiB.toFixed(0)} MiB; phases ${JSON.stringify(phases)}`,
    );
    return {
      count,
      entry,
      operatorEnv: { ...imageEnv(), ...operatorEnv },
      pods: p.live().length,
      kwokWasRunning,
      empty,
      full,
      createdS,
      podsS,
      runningS,
      podsRunning: p.live(podRunning).length,
      phases,
      operatorCpuS,
      writes: writesOf(metrics),
      series,
    };
  } finally {
    onInterrupt.delete(cleanup);
    await cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// Report.

type Floor = Awaited<ReturnType<typeof floor>>;
type Cold = Awaited<ReturnType<typeof cold>>;
type Warm = Awaited<ReturnType<typeof warm>>;
type Burst = Awaited<ReturnType<typeof burst>>;
type BurstAndFloor = Awaited<ReturnType<typeof burstAndFloor>>;
type Scale = Awaited<ReturnType<typeof scale>>;

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : "n/a");
const pp = (s: Summary) => `${ms(s.p50)} / ${ms(s.p99)}`;
const per = (n: number, samples: number) => (n / samples).toFixed(2).replace(/\.?0+$/, "");
const verdict = (met: boolean) => (met ? "met" : "**missed**");
const word = (met: boolean) => (met ? "met" : "missed");

/** The sandbox's own writes, per sample: everything but events, leases and pool upkeep. */
function ownWrites(cost: PhaseCost, replenishedPods = 0): Counts {
  const out: Counts = {};
  for (const [k, v] of Object.entries(cost.writes)) {
    if (isEvent(k) || isLease(k) || isPool(k)) continue;
    out[k] = v;
  }
  if (replenishedPods) {
    out["persistentvolumeclaims POST"] =
      (out["persistentvolumeclaims POST"] ?? 0) - replenishedPods;
    out["pods PATCH"] = (out["pods PATCH"] ?? 0) - replenishedPods;
    for (const k of Object.keys(out)) if (!out[k]) delete out[k];
  }
  return out;
}

function report(r: {
  date: string;
  commit: string | null;
  durationS: number;
  host: ReturnType<typeof hostInfo>;
  image: string;
  floor: Floor;
  cold: Cold;
  warm: Warm;
  burst: Burst;
  scale: Scale | { error: string };
  otherNamespaces: string[];
  apiServerRestarted: boolean;
}): string {
  const { floor: f, cold: c, warm: w, burst: b } = r;
  const ratio = c.ready.p50 / f.running.p50;
  const coldOwn = ownWrites(c.cost);
  const warmOwn = ownWrites(w.cost, w.replenishedPods);
  const burstOwn = ownWrites(b.cost);
  const coldOwnPer = sum(coldOwn) / c.cost.samples;
  const warmOwnPer = sum(warmOwn) / w.cost.samples;
  const replenish = sum(w.cost.writes, isPool) + 2 * w.replenishedPods;
  const lease = (p: PhaseCost) =>
    `${per(sum(p.writes, isLease), p.samples)} (${(sum(p.writes, isLease) / (p.elapsedS / 60)).toFixed(0)}/min over ${p.elapsedS.toFixed(0)} s)`;
  const s = "error" in r.scale ? undefined : r.scale;
  const scaleError = "error" in r.scale ? r.scale.error : "";
  const mib = (n: number) => `${n.toFixed(0)} MiB`;
  const rows: [string, string, string][] = [
    [
      `floor: bare pod of the operator's pod shape (emptyDir for the PVC) created → Running, p50 / p99 (ms, N=${f.running.n})`,
      pp(f.running),
      "",
    ],
    [
      "… → sandboxd in it answers `/healthz` (polled every 10 ms from the node), p50 / p99 (ms)",
      pp(f.serving),
      "",
    ],
    ["… → kubelet reports it Ready (1 s probe period), p50 / p99 (ms)", pp(f.kubeletReady), ""],
    [`cold Sandbox created → status.phase Ready, p50 / p99 (ms, N=${c.ready.n})`, pp(c.ready), ""],
    [
      "… created → its PVC Bound / its pod created / pod Running, p50 (ms)",
      `${ms(c.claimBound.p50)} / ${ms(c.podCreated.p50)} / ${ms(c.podRunning.p50)}`,
      "",
    ],
    [
      "… created → pod Running, p50 / p99 (ms) (the floor's measure, on the sandbox's pod)",
      pp(c.podRunning),
      "",
    ],
    [
      "cold / floor (created → Ready over created → Running), p50",
      `${ratio.toFixed(2)}x (${verdict(ratio <= 1.2)})`,
      "≤ 1.2x",
    ],
    ["… created → the API server's watch shows the Sandbox, p50 (ms)", ms(c.sandboxSeen.p50), ""],
    [
      `warm adoption created → Ready, p50 / p99 (ms, N=${w.ready.n})`,
      `${pp(w.ready)} (p50 ${verdict(w.ready.p50 <= 100)}, p99 ${verdict(w.ready.p99 <= 300)})`,
      "p50 ≤ 100 ms, p99 ≤ 300 ms",
    ],
    [
      "… created → watch shows the Sandbox / the warm pod claimed / its PVC claimed, p50 (ms)",
      `${ms(w.sandboxSeen.p50)} / ${ms(w.podClaimed.p50)} / ${ms(w.claimClaimed.p50)}`,
      "",
    ],
    ["reference: agent-sandbox warm claim, p50 / p99 (ms, published)", "92 / 376", ""],
    [
      "API writes per sandbox to its own objects (sandbox status and children), cold / warm",
      `${per(sum(coldOwn), c.cost.samples)} (${verdict(coldOwnPer <= 6)}) / ${per(sum(warmOwn), w.cost.samples)} (${verdict(warmOwnPer <= 6)})`,
      "≤ 6",
    ],
    [
      "… plus events, cold / warm",
      `${per(sum(c.cost.writes, isEvent), c.cost.samples)} / ${per(sum(w.cost.writes, isEvent), w.cost.samples)}`,
      "",
    ],
    [
      "… plus warm-pool replenishment per adoption (new warm PVC + pod, pool status)",
      per(replenish, w.cost.samples),
      "",
    ],
    [
      "… plus lease renewals per sandbox, cold / warm (a cost of time, not of sandboxes)",
      `${lease(c.cost)} / ${lease(w.cost)}`,
      "",
    ],
    ["reference: agent-sandbox writes per claim", "about 23", ""],
    [
      `${BURST} Sandboxes created at once: Ready; time until the last is Ready (s)`,
      `${b.ready}/${BURST}; ${(b.wallMs / 1000).toFixed(1)}`,
      "",
    ],
    ["… each created → Ready, p50 / p99 (ms)", pp(b.perSandbox), ""],
    ["… each created → pod Running, p50 / p99 (ms)", pp(b.podRunning), ""],
    [
      "… API writes per sandbox to its own objects / events",
      `${per(sum(burstOwn), b.cost.samples)} / ${per(sum(b.cost.writes, isEvent), b.cost.samples)}`,
      "",
    ],
  ];
  if (s) {
    rows.push(
      [
        "operator RSS / heap used, 0 objects (5 s after it is ready)",
        `${mib(s.empty.rssMiB)} / ${mib(s.empty.heapUsedMiB)}`,
        "",
      ],
      [
        `operator RSS / heap used, ${SCALE} Sandboxes and their ${SCALE * 5} children on a fake node`,
        `${mib(s.full.rssMiB)} / ${mib(s.full.heapUsedMiB)} (peak RSS ${mib(s.full.hwmMiB)})`,
        "",
      ],
    );
  } else {
    rows.push(["operator memory at 1,000 Sandboxes", `not measured: ${scaleError}`, ""]);
  }
  const table = (head: string[], body: string[][]) =>
    [`| ${head.join(" | ")} |`, `| ${head.map((_, i) => (i ? "---:" : "---")).join(" | ")} |`]
      .concat(body.map((row) => `| ${row.join(" | ")} |`))
      .join("\n");

  const keys = [
    ...new Set([...Object.keys(coldOwn), ...Object.keys(warmOwn), ...Object.keys(burstOwn)]),
  ].sort();
  const writeRows = keys.map((k) => [
    `\`${k}\``,
    per(coldOwn[k] ?? 0, c.cost.samples),
    per(warmOwn[k] ?? 0, w.cost.samples),
    per(burstOwn[k] ?? 0, b.cost.samples),
  ]);
  writeRows.push(
    [
      "**own objects, total**",
      per(sum(coldOwn), c.cost.samples),
      per(sum(warmOwn), w.cost.samples),
      per(sum(burstOwn), b.cost.samples),
    ],
    [
      "`events POST`",
      per(sum(c.cost.writes, isEvent), c.cost.samples),
      per(sum(w.cost.writes, isEvent), w.cost.samples),
      per(sum(b.cost.writes, isEvent), b.cost.samples),
    ],
    [
      "`leases` (renewals every 2 s, whatever the load)",
      per(sum(c.cost.writes, isLease), c.cost.samples),
      per(sum(w.cost.writes, isLease), w.cost.samples),
      per(sum(b.cost.writes, isLease), b.cost.samples),
    ],
    [
      "warm replenishment: `persistentvolumeclaims POST` + `pods PATCH` (new warm pods) + `sandboxpools/status PATCH`",
      "",
      `${per(w.replenishedPods, w.cost.samples)} + ${per(w.replenishedPods, w.cost.samples)} + ${per(sum(w.cost.writes, isPool), w.cost.samples)}`,
      "",
    ],
  );
  const floorLeases = sum(f.cost.writes, isLease);
  const floorOther = sum(f.cost.writes, (k) => !isLease(k));
  const loads = [f, c, w, b].map((p) => p.cost.loadAvg1.toFixed(1)).join(", ");

  const notes: string[] = [];
  notes.push(
    `**Cold: ${word(ratio <= 1.2)}** (${ratio.toFixed(2)}x the floor at p50). The floor is the operator's exact pod (same image, security context, resources, probes, token from a Secret) with an emptyDir where the PVC goes, created directly; the cold Sandbox adds the operator's reaction, its PVC being provisioned and bound before the pod is created (p50 ${ms(c.claimBound.p50)} ms after the create), and sandboxd answering the operator's own health check once the container runs (the floor's sandboxd answers ${ms(f.serving.p50 - f.running.p50)} ms after Running at p50).`,
  );
  notes.push(
    `**Warm adoption: p50 ${word(w.ready.p50 <= 100)}, p99 ${word(w.ready.p99 <= 300)}** (${pp(w.ready)} ms). Before each create the bench waited until the pool's status.warmReady was ≥ 1 and a ready warm pod was in its own watch (p50 wait ${ms(w.waitForWarm.p50)} ms, max ${ms(w.waitForWarm.max)} ms); every counted sample's status.podName is a pool pod name.${w.notAdopted.length ? ` Not adoptions, left out: ${w.notAdopted.join(", ")}.` : " No sample fell back to a cold start."}`,
  );
  notes.push(
    `**API writes: cold ${word(coldOwnPer <= 6)}, warm ${word(warmOwnPer <= 6)}.** Counted from the operator's \`sandpit_api_writes_total\` (successful non-GET requests) between two quiet points (3 s without any write but lease renewals) around each part, divided by its samples. Warm replenishment: ${w.replenishedPods} warm pods were created during the ${w.cost.samples} adoptions (one PVC POST and one pod apply each; the pool's pod PATCHes are taken out of the adoption column by that count) plus ${sum(w.cost.writes, isPool)} pool status writes. During the floor part (no Sandbox) the operator wrote ${floorOther} times besides ${floorLeases} lease renewals.`,
  );
  notes.push(
    `**${BURST} at once:** ${b.ready}/${BURST} Ready, the last ${(b.wallMs / 1000).toFixed(1)} s after the first create (all creates issued at once); ${b.otherPodsOnNode} other pod${b.otherPodsOnNode === 1 ? " was" : "s were"} on the node when it started (maxPods 250). The pods' own start is what takes the time: created → pod Running p50 ${ms(b.podRunning.p50)} ms against created → Ready p50 ${ms(b.perSandbox.p50)} ms. These sandboxes set \`resources.ephemeralStorage: ${BURST_EPHEMERAL}\`: the operator's pod sets an ephemeral-storage limit (default 2Gi) but no request, so Kubernetes makes the request equal to the limit, and with the default 2Gi this node (about 249 GiB of allocatable disk) schedules only 124 sandboxes; the other 76 stay Pending (Insufficient ephemeral-storage), as a first run showed. Deleting them and waiting for their pods to go took ${b.cleanupS.toFixed(0)} s. Operator CPU during the part: ${b.cost.operatorCpuS.toFixed(1)} s.`,
  );
  if (s) {
    const full = s.series.filter((x) => x.pods >= SCALE);
    notes.push(
      `**Memory at ${SCALE} Sandboxes:** a second operator process, watching a namespace of its own, with pods sent to one kwok node (nodeSelector \`type: kwok\` and its toleration) and the PVCs in a WaitForFirstConsumer class of the same provisioner (the default class binds at once to a volume pinned to the real node, which a pod held to the fake node could not use). Creates ${SCALE_CONCURRENCY} at a time: all ${SCALE} Sandboxes in ${s.createdS.toFixed(1)} s, ${SCALE} pods existed after ${s.podsS.toFixed(0)} s, ${s.podsRunning} Running after ${s.runningS.toFixed(0)} s; memory read 15 s later. The fake pods are Running and Ready but nothing answers at their addresses, so the sandboxes stay Starting (phases then: ${Object.entries(
        s.phases,
      )
        .map(([k, v]) => `${k} ${v}`)
        .join(
          ", ",
        )}), as expected: the operator keeps health-checking them, ${s.operatorCpuS.toFixed(0)} s of its CPU over the part. RSS sampled every 5 s over the part went from ${mib(s.series[0]?.rssMiB ?? NaN)} to ${mib(Math.max(...s.series.map((x) => x.rssMiB)))} at most; once all ${SCALE} pods existed, heap used swung between ${mib(Math.min(...full.map((x) => x.heapUsedMiB)))} and ${mib(Math.max(...full.map((x) => x.heapUsedMiB)))} from one collection to the next (heap total ${mib(s.full.heapTotalMiB)} at the end), so the single heap reading in the table is only indicative (the series is in the raw results).${s.kwokWasRunning ? " kwok was already running and was left running." : ""}`,
    );
  }
  notes.push(
    `**Load:** 1-minute load average at the start of the floor, cold, warm and burst parts: ${loads} (2 cores).${r.otherNamespaces.length ? ` Other test namespaces on the cluster when the run started: ${[...new Set(r.otherNamespaces)].join(", ")}.` : ""}${r.apiServerRestarted ? " **The API server was restarted during the run** (not by this bench)." : ""}`,
  );

  return `## Kubernetes operator

Command: \`${COMMAND}\` (as root; brings the local cluster up when it is not and leaves it running), run ${r.date.slice(0, 16).replace("T", " ")} UTC, commit \`${r.commit ?? "unknown"}\`, ${(r.durationS / 60).toFixed(0)} min, ${r.host.cpus} × ${r.host.cpuModel}, ${(r.host.totalMemBytes / 2 ** 30).toFixed(1)} GiB, Node ${r.host.node}. One run, a fresh namespace with its own operator process (out of cluster, the test harness's settings: \`SANDPIT_CPU_REQUEST=10m\`, 32 sandbox workers, leader election on); sandboxes are created and awaited one after another except in the ${BURST}-at-once part, and their times are taken from watches (created = when the create call was made, Ready = when a watch event first showed status.phase Ready).

${table(["Metric", "Result", "Goal"], rows)}

API writes per sandbox by resource and verb (successful writes counted by the operator, divided by the samples of the part):

${table([`Resource and verb`, `cold (N=${c.cost.samples})`, `warm adoption (N=${w.cost.samples})`, `${BURST} at once`], writeRows)}

${notes.join("\n\n")}
`;
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const started = now();
  const date = new Date().toISOString();
  const kubeconfig = await clusterUp();
  const image = await clusterImage();
  const c = clients(kubeconfig);
  await ensureCrds(c);
  const kube = new Kube(c.kc, { fieldManager: "sandpit-bench" });
  const nsList = await c.core.listNamespace();
  const otherNamespaces = nsList.items
    .map((n) => n.metadata!.name!)
    .filter((n) => !["default", "kube-system", "kube-public", "kube-node-lease"].includes(n))
    .map((n) => n.replace(/-[a-z0-9]{5,6}$/, "-*"));

  const apiServerAtStart = await apiServerIdentity();
  const ns = await benchNamespace(c, "bench-op");
  log(`namespace ${ns}, image ${image}`);
  let op: OperatorProcess | undefined;
  const trackers: Tracker[] = [];
  let parts: { floor: Floor; cold: Cold; warm: Warm; burst: Burst; burstAndFloor: BurstAndFloor };
  const cleanup = async () => {
    for (const t of trackers) t.stop();
    if (op) await stopOperator(op);
    await deleteNamespaceAndWait(c, ns, 5 * 60_000);
  };
  onInterrupt.add(cleanup);
  try {
    op = await startOperator({ kubeconfig, namespace: ns, image, env: OPERATOR_ENV });
    const pods = new Tracker(c.kc, `/api/v1/namespaces/${ns}/pods`, {
      running: podRunning,
      ready: podReady,
      claimed: claimedBySandbox,
    });
    const sbx = new Tracker(c.kc, sandboxPath(ns), { ready: (o) => o.status?.phase === "Ready" });
    const claims = new Tracker(c.kc, `/api/v1/namespaces/${ns}/persistentvolumeclaims`, {
      bound: (o) => o.status?.phase === "Bound",
      claimed: claimedBySandbox,
    });
    trackers.push(pods, sbx, claims);
    await Promise.all(trackers.map((t) => t.start()));
    const m: Main = { c, kube, ns, op, pods, sbx, claims, image, env: OPERATOR_ENV };

    log("floor: bare pods");
    const fl = await floor(m);
    log(`floor: created → Running p50 ${ms(fl.running.p50)} ms`);
    log("cold sandboxes");
    const co = await cold(m);
    log(`cold: created → Ready p50 ${ms(co.ready.p50)} ms`);
    log("warm adoptions");
    const wa = await warm(m);
    log(`warm: created → Ready p50 ${ms(wa.ready.p50)} ms`);
    log(`${BURST} at once, and as many bare pods`);
    const bf = await burstAndFloor(m, BURST);
    parts = { floor: fl, cold: co, warm: wa, burst: bf.sandboxes, burstAndFloor: bf };
  } catch (err) {
    if (op) process.stderr.write(`operator log tail:\n${op.logs().slice(-5000)}\n`);
    throw err;
  } finally {
    onInterrupt.delete(cleanup);
    await cleanup();
  }

  log(`memory at ${SCALE} sandboxes (kwok)`);
  let sc: Scale | { error: string };
  try {
    sc = await scale(c, kubeconfig, image);
  } catch (err) {
    log(`scale part failed: ${(err as Error).stack}`);
    sc = { error: (err as Error).message };
  }

  const record = {
    date,
    commit: commitMeasured(),
    durationS: (now() - started) / 1000,
    host: hostInfo(),
    image,
    ...parts,
    scale: sc,
    otherNamespaces,
    apiServerRestarted: (await apiServerIdentity()) !== apiServerAtStart,
  };
  const section = report(record);
  process.stdout.write(section);
  if (SMOKE) return;
  // The parts that can also run alone are kept by count, with the headline of all of them.
  const previous = await readRecord();
  const run = { date, commit: record.commit, loadEnd: os.loadavg()[0]!, command: COMMAND };
  const out: Record_ = {
    ...record,
    scaleRuns: {
      ...previous.scaleRuns,
      ...("error" in sc
        ? {}
        : { [sc.count]: { ...sc, ...run, loadStart: parts.floor.cost.loadAvg1 } }),
    },
    burstRun: {
      ...run,
      loadStart: parts.burstAndFloor.floorStart.loadAvg1,
      ...parts.burstAndFloor,
    },
    writesRun: {
      ...run,
      loadStart: parts.cold.cost.loadAvg1,
      samples: parts.cold.cost.samples,
      readyP50Ms: parts.cold.ready.p50,
      writes: parts.cold.cost.writes,
    },
  };
  out.headline = headlineOf(out);
  await writeResults(join(ROOT, "bench/results/operator.json"), out);
  await updateResultsMd("## Kubernetes operator", section);
  await updateResultsMd(SCALE_HEADING, scaleSection(out));
}

// ---------------------------------------------------------------------------------------------
// One part alone: `--memory-only [--sandboxes N] [--max-minutes M] [--operator-env KEY=VALUE]...`
// (the kwok memory case at N; the operator gets the image's V8 flags and environment, which
// --operator-env overrides or adds to)
// and `--writes-only [--sandboxes N]` (N cold sandboxes, one after another, and the operator's
// writes for them). Each run is kept in bench/results/operator.json (scaleRuns by count,
// operator environment and commit; writesRun), which also gets the issue-17 headline; the section "## Operator at scale" lists them.

const SCALE_HEADING = "## Operator at scale";
const GOAL_SANDBOXES = 10_000;
const GOAL_RSS_MIB = 300;
const GOAL_COLD_WRITES = 4;
const GOAL_BURST = 200;
const GOAL_BURST_RATIO = 1.1;

/**
 * `--heap-snapshot FILE` (with --memory-only): where the measured operator's heap goes once all
 * its Sandboxes' pods run, to see what holds its memory. Taken after the memory is read (a
 * snapshot costs the process memory of its own), by the signal its NODE_OPTIONS then name.
 */
const HEAP_SNAPSHOT = argument("--heap-snapshot");

/** Has process `pid` write its heap snapshot (node's own name, in its cwd), and moves it to `to`. */
async function heapSnapshot(pid: number, to: string): Promise<void> {
  process.kill(pid, "SIGUSR2");
  const ours = (f: string) => f.startsWith("Heap.") && f.includes(`.${pid}.`);
  let [last, still] = [-1, 0];
  for (let i = 0; i < 300; i++) {
    await sleep(1_000);
    const file = (await readdir(ROOT)).find(ours);
    if (!file) continue;
    const size = (await stat(join(ROOT, file))).size;
    still = size > 0 && size === last ? still + 1 : 0;
    if (still >= 3) {
      await rename(join(ROOT, file), to);
      log(`scale: the operator's heap snapshot is ${to} (${(size / 2 ** 20).toFixed(0)} MiB)`);
      return;
    }
    last = size;
  }
  log("scale: warning: no heap snapshot within 300 s");
}

function argument(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

/**
 * `--operator-env KEY=VALUE`, as often as needed: added to the measured operator's environment
 * (NODE_OPTIONS, MALLOC_ARENA_MAX, ...) to compare settings at one count.
 */
function operatorEnvArguments(): Record<string, string> {
  const env: Record<string, string> = {};
  process.argv.forEach((a, i) => {
    if (a !== "--operator-env") return;
    const kv = process.argv[i + 1] ?? "";
    const at = kv.indexOf("=");
    if (at < 1) throw new Error(`--operator-env: KEY=VALUE, not ${kv}`);
    env[kv.slice(0, at)] = kv.slice(at + 1);
  });
  return env;
}

interface RunInfo {
  date: string;
  commit: string | null;
  loadStart: number;
  loadEnd: number;
  command: string;
}
type ScaleRun = Scale & RunInfo;
interface WritesRun extends RunInfo {
  samples: number;
  readyP50Ms: number;
  writes: Counts;
  /** The namespace's first sandbox's, which also made the namespace's policies (since 2026-12-05). */
  firstWrites?: Counts;
}
type BurstRun = RunInfo & BurstAndFloor;
interface Record_ {
  scaleRuns?: Record<string, ScaleRun>;
  writesRun?: WritesRun;
  burstRun?: BurstRun;
  headline?: HeadlineRow[];
  [k: string]: unknown;
}

function headlineOf(r: Record_): HeadlineRow[] {
  const out: HeadlineRow[] = [];
  // The largest count, its latest run.
  const runs = Object.values(r.scaleRuns ?? {}).sort(
    (a, b) => b.count - a.count || b.date.localeCompare(a.date),
  );
  const top = runs[0];
  if (top) {
    out.push({
      metric: `Operator RSS at ${GOAL_SANDBOXES.toLocaleString("en")} Sandboxes (fake nodes)`,
      value: `${top.full.rssMiB.toFixed(0)} MiB at ${top.pods.toLocaleString("en")} Sandboxes' pods`,
      floor: `${top.empty.rssMiB.toFixed(0)} MiB (the same operator with 0 objects)`,
      ratio: Number((top.full.rssMiB / top.empty.rssMiB).toFixed(2)),
      goal: `≤ ${GOAL_RSS_MIB} MiB`,
      met: top.pods >= GOAL_SANDBOXES && top.full.rssMiB <= GOAL_RSS_MIB,
    });
  }
  const w = r.writesRun;
  if (w) {
    const own = sum(w.writes, (k) => !isEvent(k) && !isLease(k) && !isPool(k)) / w.samples;
    out.push({
      metric: "API writes per cold sandbox (events and lease renewals apart)",
      value: per(own * w.samples, w.samples),
      floor: "n/a",
      ratio: null,
      goal: `≤ ${GOAL_COLD_WRITES}`,
      met: own <= GOAL_COLD_WRITES,
    });
  }
  const b = r.burstRun;
  if (b) {
    const ratio = b.sandboxes.wallMs / b.floor.wallMs;
    const all = b.sandboxes.ready === b.count && b.floor.ready === b.count;
    out.push({
      metric: `${b.count} cold Sandboxes at once → all Ready / ${b.count} bare pods → all Ready`,
      value: `${(b.sandboxes.wallMs / 1000).toFixed(1)} s (${b.sandboxes.ready}/${b.count} Ready)`,
      floor: `${(b.floor.wallMs / 1000).toFixed(1)} s (${b.floor.ready}/${b.count} Ready)`,
      ratio: Number(ratio.toFixed(2)),
      goal: `≤ ${GOAL_BURST_RATIO}x, ${GOAL_BURST} at once`,
      met: all && b.count >= GOAL_BURST && ratio <= GOAL_BURST_RATIO,
    });
  }
  return out;
}

const envNote = (env: Record<string, string> | undefined) =>
  Object.entries(env ?? {})
    .map(([k, v]) => `, \`${k}=${v}\``)
    .join("");

function scaleSection(r: Record_): string {
  const rows = Object.values(r.scaleRuns ?? {})
    .sort((a, b) => a.count - b.count || a.date.localeCompare(b.date))
    .map((s) => {
      const spaces = Object.entries(s.full.heapSpacesMiB ?? {})
        .filter(([, v]) => v > 0)
        .map(([k, v]) => `${k.replace(/_space$/, "")} ${v}`)
        .join(", ");
      return `| ${s.count.toLocaleString("en")} (${s.pods} pods, ${s.podsRunning} Running) | ${s.empty.rssMiB.toFixed(0)} | ${s.full.rssMiB.toFixed(0)} (peak ${s.full.hwmMiB.toFixed(0)}) | ${s.full.heapUsedMiB.toFixed(0)} / ${s.full.heapTotalMiB.toFixed(0)} | ${s.full.externalMiB?.toFixed(0) ?? "n/a"} | ${spaces} | ${s.operatorCpuS.toFixed(0)} | \`${s.entry ?? "operator/src/main.ts"}\`${envNote(s.operatorEnv)} | \`${s.commit}\`, ${s.date.slice(0, 16).replace("T", " ")} UTC, load ${s.loadStart.toFixed(1)} → ${s.loadEnd.toFixed(1)} |`;
    });
  const b = r.burstRun;
  const w = r.writesRun;
  const writeRows = w
    ? Object.entries(w.writes)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `| \`${k}\` | ${per(v, w.samples)} |`)
    : [];
  const head = (r.headline ?? []).map(
    (h) =>
      `| ${h.metric} | ${h.value} | ${h.floor} | ${h.ratio ?? "n/a"} | ${h.goal} | ${h.met ? "met" : "**missed**"} |`,
  );
  return `${SCALE_HEADING}

The operator's memory with many Sandboxes on fake (kwok) nodes and its API writes per cold
sandbox, each part run alone (\`${COMMAND} --memory-only --sandboxes N\`, \`${COMMAND} --writes-only
--sandboxes N\`; as root, under the cluster lock). The memory case is the one of
"## Kubernetes operator" (a second operator process in a namespace of its own, PVCs in a
WaitForFirstConsumer class, pods held to the fake nodes, which never answer: the sandboxes stay
Starting and the operator keeps checking them); memory is read 15 s after the last pod runs. The
operator runs as the esbuild bundle its image ships (\`bench/dist/operator.mjs\`, built by the
run), with the environment the row lists (the image's V8 flags and malloc setting since
\`a782d72\`), unless the row says otherwise: run from its TypeScript source it takes ~65 MiB more
(module graph and type stripping), which a deployment never pays.

| Metric | Value | Floor | Ratio | Goal | |
| --- | ---: | ---: | ---: | ---: | --- |
${head.join("\n")}

| Sandboxes | RSS, 0 objects (MiB) | RSS, all (MiB) | heap used / total (MiB) | external (MiB) | heap spaces used (MiB) | operator CPU (s) | operator run from | run |
| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |
${rows.join("\n")}
${b ? burstText(b) : ""}${
    w
      ? `
Writes per cold sandbox (${w.samples} created one after another and awaited Ready, p50 ${ms(w.readyP50Ms)} ms; \`${w.commit}\`, ${w.date.slice(0, 16).replace("T", " ")} UTC, load ${w.loadStart.toFixed(1)} → ${w.loadEnd.toFixed(1)})${
          w.firstWrites
            ? `, after a first sandbox of the namespace, which also made the namespace's shared network policies: its writes were ${Object.entries(
                w.firstWrites,
              )
                .filter(([k]) => !isEvent(k) && !isLease(k))
                .map(([k, v]) => `\`${k}\` ${v}`)
                .join(", ")}`
            : ""
        }:

| Resource and verb | per sandbox |
| --- | ---: |
${writeRows.join("\n")}
`
      : ""
  }`;
}

function burstText(b: BurstRun): string {
  const side = (
    what: string,
    x: { ready: number; wallMs: number; cleanupS: number },
    per: Summary,
  ) =>
    `| ${what} | ${x.ready}/${b.count} | ${(x.wallMs / 1000).toFixed(1)} | ${ms(per.p50)} / ${ms(per.p99)} | ${x.cleanupS.toFixed(0)} |`;
  const start = (x: { cpuBusy: number; settleS: number; loadAvg1: number }) =>
    `${(x.cpuBusy * 100).toFixed(0)}% busy after ${x.settleS.toFixed(0)} s, load ${x.loadAvg1.toFixed(1)}`;
  return `
${b.count} at once (\`${b.command}\`; \`${b.commit}\`, ${b.date.slice(0, 16).replace("T", " ")} UTC): first ${b.count} bare pods of the sandboxes' shape (the operator's own pod manifest with \`resources.ephemeralStorage: ${BURST_EPHEMERAL}\` and, run alone, a CPU request of ${BURST_ENV.SANDPIT_CPU_REQUEST}, an emptyDir for the volume, created straight through the API, no operator involved) all at once, deleted and gone; then ${b.count} cold Sandboxes of that shape all at once. Each side starts once the CPUs were under 25% busy over 5 s (floor: ${start(b.floorStart)}; Sandboxes: ${start(b.sandboxStart)}). Ready is the kubelet's Ready condition for a bare pod and status.phase Ready for a Sandbox.

| ${b.count} at once | Ready | first create → last Ready (s) | each create → Ready, p50 / p99 (ms) | cleanup (s) |
| --- | ---: | ---: | ---: | ---: |
${side("bare pods (floor)", b.floor, b.floor.perPod)}
${side("Sandboxes", b.sandboxes, b.sandboxes.perSandbox)}

Sandboxes / floor: ${(b.sandboxes.wallMs / b.floor.wallMs).toFixed(2)}x; the operator's CPU over the Sandboxes' part ${b.sandboxes.cost.operatorCpuS.toFixed(1)} s, its API writes per sandbox ${per(
    sum(b.sandboxes.cost.writes, (k) => !isEvent(k) && !isLease(k)),
    b.count,
  )}.
${clusterCpuTable(b)}`;
}

/** CPU seconds of the cluster's own processes over each side, from creates to cleanup's end. */
function clusterCpuTable(b: {
  floor: { clusterCpuS?: Record<string, number> };
  sandboxes: { clusterCpuS?: Record<string, number>; cost: PhaseCost };
}): string {
  const f = b.floor.clusterCpuS;
  const s = b.sandboxes.clusterCpuS;
  if (!f || !s) return "";
  const names = Object.keys(s).filter((k) => f[k] !== undefined);
  const total = (x: Record<string, number>) => names.reduce((a, k) => a + x[k]!, 0);
  const rows = names
    .sort((x, y) => s[y]! - s[x]!)
    .map((k) => `| ${k} | ${f[k]!.toFixed(1)} | ${s[k]!.toFixed(1)} |`);
  return `
CPU seconds of the cluster's own processes over each side (creates, Ready, deletion and cleanup; the pods' own processes not included), the operator apart:

| process | bare pods (floor) | Sandboxes |
| --- | ---: | ---: |
${rows.join("\n")}
| all of the above | ${total(f).toFixed(1)} | ${total(s).toFixed(1)} |
| the operator | – | ${b.sandboxes.cost.operatorCpuS.toFixed(1)} |
`;
}

async function readRecord(): Promise<Record_> {
  try {
    return JSON.parse(await readFile(join(ROOT, "bench/results/operator.json"), "utf8")) as Record_;
  } catch {
    return {};
  }
}

async function partial(mode: "memory" | "writes" | "burst"): Promise<void> {
  const memoryOnly = mode === "memory";
  const count = Number(
    argument("--sandboxes") ?? { memory: SCALE, writes: COLD, burst: BURST }[mode],
  );
  const maxMinutes = Number(argument("--max-minutes") ?? 25);
  if (!Number.isInteger(count) || count < 1) throw new Error(`--sandboxes: a count, not ${count}`);
  const kubeconfig = await clusterUp();
  const image = await clusterImage();
  const c = clients(kubeconfig);
  await ensureCrds(c);
  const info = () => ({ date, commit: commitMeasured(), loadStart, loadEnd: os.loadavg()[0]! });
  const date = new Date().toISOString();
  const loadStart = os.loadavg()[0]!;
  const record = await readRecord();
  if (memoryOnly) {
    const env = operatorEnvArguments();
    const envText = Object.entries(env)
      .map(([k, v]) => ` --operator-env '${k}=${v}'`)
      .join("");
    const command = `${COMMAND} --memory-only --sandboxes ${count}${envText}`;
    log(`memory at ${count} sandboxes (kwok), at most ${maxMinutes} min of waiting`);
    const sc = await scale(c, kubeconfig, image, count, maxMinutes * 60_000, env);
    // One row per count, operator environment and commit: a run with other settings or code
    // does not replace another.
    const key = `${count}${envNote(sc.operatorEnv)} ${commitMeasured()}`;
    record.scaleRuns = { ...record.scaleRuns, [key]: { ...sc, ...info(), command } };
  } else {
    const command = `${COMMAND} --${mode}-only --sandboxes ${count}`;
    const ns = await benchNamespace(c, `bench-${mode}`);
    const kube = new Kube(c.kc, { fieldManager: "sandpit-bench" });
    let op: OperatorProcess | undefined;
    const trackers: Tracker[] = [];
    const cleanup = async () => {
      for (const t of trackers) t.stop();
      if (op) await stopOperator(op);
      await deleteNamespaceAndWait(c, ns, 5 * 60_000);
    };
    onInterrupt.add(cleanup);
    try {
      const env = mode === "burst" ? { ...BURST_ENV, ...operatorEnvArguments() } : OPERATOR_ENV;
      op = await startOperator({ kubeconfig, namespace: ns, image, env });
      const pods = new Tracker(c.kc, `/api/v1/namespaces/${ns}/pods`, {
        running: podRunning,
        ready: podReady,
      });
      const sbx = new Tracker(c.kc, sandboxPath(ns), { ready: (o) => o.status?.phase === "Ready" });
      const claims = new Tracker(c.kc, `/api/v1/namespaces/${ns}/persistentvolumeclaims`, {
        bound: (o) => o.status?.phase === "Bound",
      });
      trackers.push(pods, sbx, claims);
      await Promise.all(trackers.map((t) => t.start()));
      const m: Main = { c, kube, ns, op, pods, sbx, claims, image, env };
      if (mode === "burst") {
        record.burstRun = { ...info(), command, ...(await burstAndFloor(m, count)) };
      } else {
        const co = await cold(m, count);
        log(`writes: ${JSON.stringify(co.cost.writes)} over ${count} cold sandboxes`);
        record.writesRun = {
          ...info(),
          command,
          samples: count,
          readyP50Ms: co.ready.p50,
          writes: co.cost.writes,
          firstWrites: co.first.writes,
        };
      }
    } catch (err) {
      if (op) process.stderr.write(`operator log tail:\n${op.logs().slice(-5000)}\n`);
      throw err;
    } finally {
      onInterrupt.delete(cleanup);
      await cleanup();
    }
  }
  record.headline = headlineOf(record);
  const section = scaleSection(record);
  process.stdout.write(section);
  if (SMOKE) return;
  await writeResults(join(ROOT, "bench/results/operator.json"), record);
  await updateResultsMd(SCALE_HEADING, section);
}

/**
 * `--report`: writes the section again from bench/results/operator.json (after a change to the
 * wording), without measuring anything.
 */
if (process.argv.includes("--report")) {
  const record = JSON.parse(
    await readFile(join(ROOT, "bench/results/operator.json"), "utf8"),
  ) as Parameters<typeof report>[0] & Record_;
  const section = report(record);
  process.stdout.write(section);
  await updateResultsMd("## Kubernetes operator", section);
  if (record.scaleRuns || record.writesRun)
    await updateResultsMd(SCALE_HEADING, scaleSection(record));
} else if (process.argv.includes("--memory-only")) {
  await partial("memory");
} else if (process.argv.includes("--writes-only")) {
  await partial("writes");
} else if (process.argv.includes("--burst-only")) {
  await partial("burst");
} else {
  await main();
}
