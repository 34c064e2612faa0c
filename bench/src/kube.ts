/**
 * What the benchmarks on the local cluster (test/cluster) share: watch-based timing (the first
 * moment each object was seen in a given state), the cluster and its sandbox image, a fresh
 * namespace per run and its removal, clean-up on SIGINT/SIGTERM, and the rewrite of one section
 * of bench/RESULTS.md.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import os from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import * as prettier from "prettier";
import { type KubeConfig, Watch } from "@kubernetes/client-node";
import { GROUP, LABEL, VERSION } from "@sandpit/operator/api";
import { ensureTestImage } from "../../test/docker/test-image.ts";
import { ensureDocker } from "../../test/docker/dockerd.ts";
import {
  type Clients,
  type OperatorProcess,
  createNamespace,
  waitFor,
} from "../../test/cluster/harness.ts";
import { CLUSTER_STATE, loadIntoCluster } from "../../test/cluster/images.ts";

const run = promisify(execFile);
export const ROOT = new URL("../../", import.meta.url).pathname;

export const log = (line: string) =>
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const now = () => performance.now();

/** The machine's CPU time so far, busy and in all (from /proc/stat, every core). */
async function cpuTimes(): Promise<{ busy: number; total: number }> {
  const line = (await readFile("/proc/stat", "utf8")).split("\n")[0]!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3]! - f[4]!, total }; // idle, iowait
}

/**
 * Waits (at most `maxMs`) until the machine's CPUs were less than 25% busy over 5 s, so a part
 * does not start in the wake of the previous one; returns what it found.
 */
export async function settleCpu(maxMs: number) {
  const t0 = now();
  let busy: number;
  for (;;) {
    const a = await cpuTimes();
    await sleep(5_000);
    const b = await cpuTimes();
    busy = (b.busy - a.busy) / (b.total - a.total || 1);
    if (busy < 0.25 || now() - t0 > maxMs) break;
  }
  return { cpuBusy: busy, settleS: (now() - t0) / 1000, loadAvg1: os.loadavg()[0]! };
}

// ---------------------------------------------------------------------------------------------
// Watch-based timing: the first moment each object was seen in a given state.

export interface Obj {
  metadata: {
    name: string;
    resourceVersion?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  status?: Record<string, unknown> & {
    phase?: string;
    podName?: string;
    conditions?: { type: string; status: string }[];
  };
}

export type Marks = Record<string, (o: Obj) => boolean>;

/**
 * One watch on one collection, restarted from its last resourceVersion when the server closes it
 * (timeoutSeconds) and from scratch on 410. Records, per object name, when each mark first held.
 */
export class Tracker {
  readonly objects = new Map<string, Obj>();
  readonly #first = new Map<string, Map<string, number>>();
  readonly #waiters = new Set<() => void>();
  readonly #watch: Watch;
  #abort: AbortController | undefined;
  #rv: string | undefined;
  #stopped = false;
  #failures = 0;
  readonly path: string;
  readonly marks: Marks;
  restarts = 0;

  constructor(kc: KubeConfig, path: string, marks: Marks) {
    this.#watch = new Watch(kc);
    this.path = path;
    this.marks = marks;
  }

  async start(): Promise<void> {
    await this.#connect();
  }

  stop(): void {
    this.#stopped = true;
    this.#abort?.abort();
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    this.#abort = await this.#watch.watch(
      this.path,
      { allowWatchBookmarks: true, timeoutSeconds: 25, resourceVersion: this.#rv },
      (type, obj: Obj & { code?: number }) => this.#event(type, obj),
      (err: unknown) => {
        if (this.#stopped) return;
        this.restarts++;
        if (err) this.#failures++;
        if (this.#failures > 50) {
          log(`watch ${this.path} failed 50 times in a row; giving up on it`);
          return;
        }
        setTimeout(() => void this.#connect(), err ? 250 : 0);
      },
    );
  }

  #event(type: string, obj: Obj & { code?: number }): void {
    const at = now();
    this.#failures = 0;
    if (type === "ERROR") {
      if (obj.code === 410) this.#rv = undefined; // too old: list again (synthetic ADDEDs)
      return;
    }
    this.#rv = obj.metadata?.resourceVersion ?? this.#rv;
    if (type === "BOOKMARK") return;
    const name = obj.metadata.name;
    if (type === "DELETED") {
      this.objects.delete(name);
      this.#mark(name, "deleted", at);
    } else {
      this.objects.set(name, obj);
      this.#mark(name, "seen", at);
      for (const [mark, holds] of Object.entries(this.marks))
        if (holds(obj)) this.#mark(name, mark, at);
    }
    for (const w of this.#waiters) w();
  }

  #mark(name: string, mark: string, at: number): void {
    let m = this.#first.get(name);
    if (!m) this.#first.set(name, (m = new Map()));
    if (!m.has(mark)) m.set(mark, at);
  }

  /** When `mark` first held for `name` (performance.now() time), if it has. */
  at(name: string, mark: string): number | undefined {
    return this.#first.get(name)?.get(mark);
  }

  /** Every name ever seen, deleted ones included. */
  names(): string[] {
    return [...this.#first.keys()];
  }

  /** Forgets the marks of a name (a namesake made later starts afresh). */
  forget(name: string): void {
    this.#first.delete(name);
  }

  live(filter: (o: Obj) => boolean = () => true): Obj[] {
    return [...this.objects.values()].filter((o) => !o.metadata.deletionTimestamp && filter(o));
  }

  /** Resolves when `check` holds (checked on every event and every second), or throws. */
  until<T>(what: string, timeoutMs: number, check: () => T | undefined | false): Promise<T> {
    return new Promise((resolve, reject) => {
      const done = () => {
        this.#waiters.delete(test);
        clearTimeout(timer);
        clearInterval(tick);
      };
      const test = () => {
        const v = check();
        if (v) {
          done();
          resolve(v);
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const tick = setInterval(test, 1000);
      this.#waiters.add(test);
      test();
    });
  }

  waitMark(name: string, mark: string, timeoutMs: number): Promise<number> {
    return this.until(`${name} ${mark}`, timeoutMs, () => this.at(name, mark));
  }
}

/** A pool's pod or claim, once it carries a sandbox's label (adopted). */
export const claimedBySandbox = (o: Obj) =>
  !!o.metadata.labels?.[LABEL.pool] && !!o.metadata.labels[LABEL.sandbox];
export const podRunning = (o: Obj) => o.status?.phase === "Running";
export const podReady = (o: Obj) =>
  !!o.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");

// ---------------------------------------------------------------------------------------------
// Set-up, and clean-up when interrupted (try/finally does it otherwise).

export const onInterrupt = new Set<() => Promise<unknown>>();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    log(`${signal}: cleaning up`);
    const all = Promise.allSettled([...onInterrupt].map((f) => f()));
    void Promise.race([all, sleep(120_000)]).then(() => process.exit(130));
  });
}

export async function clusterUp(): Promise<string> {
  const { stdout } = await run(join(ROOT, "test/cluster/up"), [], {
    maxBuffer: 16 * 1024 * 1024,
    timeout: 30 * 60_000,
  });
  return stdout.trim().split("\n").at(-1)!;
}

/** The sandbox image in the cluster's containerd, as the cluster suite loads it. */
export async function clusterImage(): Promise<string> {
  const engine = await ensureDocker({ log });
  try {
    const { tag } = await ensureTestImage({ log });
    return await loadIntoCluster(tag, "sandbox", { log });
  } finally {
    await engine.stop();
  }
}

/** A fresh namespace, once its default service account exists (pods are refused before). */
export async function benchNamespace(c: Clients, prefix: string): Promise<string> {
  const ns = await createNamespace(c, prefix);
  await waitFor(`service account ${ns}/default`, 120_000, () =>
    c.core.readNamespacedServiceAccount({ name: "default", namespace: ns }),
  );
  return ns;
}

export async function stopOperator(op: OperatorProcess): Promise<void> {
  await Promise.race([op.stop(), sleep(30_000)]);
  if (op.proc.exitCode === null && op.proc.signalCode === null) await op.kill9();
}

export async function deleteNamespaceAndWait(
  c: Clients,
  ns: string,
  timeoutMs: number,
): Promise<void> {
  await c.core.deleteNamespace({ name: ns }).catch(() => undefined);
  await waitFor(
    `namespace ${ns} gone`,
    timeoutMs,
    async () => {
      try {
        await c.core.readNamespace({ name: ns });
        return false;
      } catch (err) {
        return (err as { code?: number }).code === 404;
      }
    },
    2_000,
  ).catch((err: unknown) => log(`warning: ${(err as Error).message}`));
}

export async function podsOnNode(c: Clients, node: string): Promise<number> {
  const pods = await c.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` });
  return pods.items.filter((p) => p.status?.phase !== "Succeeded" && p.status?.phase !== "Failed")
    .length;
}

export const sandboxPath = (ns: string) => `/apis/${GROUP}/${VERSION}/namespaces/${ns}/sandboxes`;

/**
 * The running test cluster's kubeconfig when its API server answers (nothing is restarted or
 * rewritten), else `test/cluster/up`.
 */
export async function runningCluster(): Promise<string> {
  const kubeconfig = join(CLUSTER_STATE, "admin.kubeconfig");
  if (existsSync(kubeconfig)) {
    try {
      await run("kubectl", ["--kubeconfig", kubeconfig, "get", "--raw", "/readyz"], {
        timeout: 10_000,
      });
      return kubeconfig;
    } catch {
      // not answering: bring it up
    }
  }
  return clusterUp();
}

/**
 * Replaces the section of bench/RESULTS.md that starts with `heading` (up to the next `## `)
 * by `section`, or appends it, and formats the file as the repository's lint expects.
 */
export async function updateResultsMd(heading: string, section: string): Promise<void> {
  const file = join(ROOT, "bench/RESULTS.md");
  const text = await readFile(file, "utf8");
  const start = text.indexOf(`${heading}\n`);
  let out: string;
  if (start < 0) out = `${text.trimEnd()}\n\n${section}`;
  else {
    const end = text.indexOf("\n## ", start + 1);
    out = text.slice(0, start) + section + (end < 0 ? "" : text.slice(end));
  }
  const options = (await prettier.resolveConfig(file)) ?? {};
  await writeFile(file, await prettier.format(out, { ...options, filepath: file }));
}
