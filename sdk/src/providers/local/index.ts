/**
 * The local provider: each sandbox is a sandboxd process, reached over a unix socket,
 * serving one directory, `<baseDir>/users/<user>/threads/<thread>/user-data`, which agents see
 * as /mnt/user-data. With bubblewrap, sandboxd and everything it runs live in their own mount,
 * PID, IPC, UTS (and optionally network) namespaces where that directory is the only writable
 * place; without it, commands are plain host processes and the virtual prefix in command text
 * is rewritten to the real directory (the file API is jailed to it either way). sandboxd runs
 * detached from the process that started it, so a sandbox keeps running (background processes,
 * servers) between the processes that use it, as a container does; see ./detached.ts.
 *
 * Why a sandboxd child rather than spawning commands in-process: the docker and kubernetes
 * providers talk to sandboxd too, so every provider shares one data plane (path jail, output
 * caps, process-group kill, code runners) and one contract suite. bench/RESULTS.md has the cost.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import * as fs from "node:fs/promises";
import { mkdirSync, symlinkSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
// The local provider starts sandboxd itself, so it (alone) uses sandboxd's host-side helpers.
import { discoverInterpreters, scrubEnv, type Interpreters } from "@sandpit/sandboxd/environment";
import { ID_PATTERN, VIRTUAL_ROOT } from "@sandpit/sandboxd/wire";
import type { Logger } from "../../logger.ts";
import type { z } from "zod";
import { validateCreate, validateListLabels } from "../../create-options.ts";
import { hasLabels, refuseUnsupported } from "../../platform-options.ts";
import { SandboxError } from "../../errors.ts";
import { parseOptions } from "../../parse-options.ts";
import { PortForwarder } from "../../port-forward.ts";
import { SandboxdClient } from "../../sandboxd-client.ts";
import { SandboxdInstance, type SandboxdLifecycle } from "../../sandboxd-instance.ts";
import type {
  SandboxCreateOptions,
  SandboxInfo,
  SandboxInstance,
  SandboxListOptions,
  SandboxProvider,
} from "../../types.ts";
import { bwrapArgs, bwrapAvailable } from "./bwrap.ts";
import {
  isAlive,
  readRun,
  removeRun,
  startTimeOf,
  stopDetached,
  withStartLock,
  writeRun,
  type RunRecord,
} from "./detached.ts";
import { LocalProviderOptions, isolationWanted, warmPoolSize } from "./options.ts";
import { WarmPool, type WarmProcess } from "./warm-pool.ts";
import {
  expired,
  readRecord,
  recordInfo,
  sandboxDirs,
  writeRecord,
  type SandboxRecord,
} from "./records.ts";

/** sandboxd's source in this repository; in the SDK's built package, its one-file bundle. */
const SANDBOXD_MAIN = fileURLToPath(import.meta.resolve("@sandpit/sandboxd/main"));
/** Where sandboxd's socket is mounted inside bubblewrap. */
const RUN_MOUNT = "/run/sandpit";
/** Where sandboxd sockets live, one short directory each: unix socket paths are limited to 107 bytes. */
const RUN_ROOT = join(tmpdir(), `sandpit-${process.getuid?.() ?? "u"}`);
/** How often the reaper looks at lifetimes and idleness. */
const REAP_EVERY_MS = 1_000;

/** False when `make` failed because its path exists: another creator was first. */
function madeFirst(make: () => unknown): boolean {
  try {
    make();
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/**
 * Host directories sandboxd's code needs: its package and the node_modules its imports load from.
 * A dependency that does not resolve is not needed: the built SDK's sandboxd bundle has all but
 * node-pty inside, and node-pty (terminals only) is an optional peer dependency.
 */
async function sandboxdCodeDirs(): Promise<string[]> {
  const dirs = new Set([dirname(dirname(SANDBOXD_MAIN))]);
  const require = createRequire(SANDBOXD_MAIN);
  for (const dep of ["zod", "ws", "node-pty"]) {
    let resolved: string;
    try {
      resolved = require.resolve(dep);
    } catch {
      continue;
    }
    const real = await fs.realpath(resolved);
    const i = real.lastIndexOf("/node_modules/");
    if (i >= 0) dirs.add(real.slice(0, i + "/node_modules".length));
  }
  return [...dirs];
}

/** What a sandboxd process is started with (the rest is the provider's). */
interface SpawnShape {
  /** Names it in errors. */
  label: string;
  /** The host directory it serves. */
  dataDir: string;
  /** Its socket's directory. */
  runDir: string;
  logPath: string;
  envs: Record<string, string>;
  /** bubblewrap: share the host's network. */
  network: boolean;
  mounts: SandboxRecord["mounts"];
  /** Told the pid as soon as the process exists (the warm pool's watchdog must know it). */
  onSpawn?: ((pid: number) => void) | undefined;
}

type State =
  | { kind: "running"; client: SandboxdClient; run: RunRecord }
  | { kind: "stopped" }
  | { kind: "killed" };

/** One sandbox's process and state, shared by every instance object handed out for it. */
class LocalSandbox implements SandboxdLifecycle {
  state: State = { kind: "stopped" };
  private starting: Promise<SandboxdClient> | null = null;
  private readonly forwarder = new PortForwarder(() => this.connect());
  readonly record: SandboxRecord;
  readonly dir: string;
  private readonly provider: LocalProvider;
  constructor(provider: LocalProvider, dir: string, record: SandboxRecord) {
    this.provider = provider;
    this.dir = dir;
    this.record = record;
  }

  get dataDir(): string {
    return join(this.dir, "user-data");
  }

  /** sandboxd's socket directory: short, as unix socket paths are limited to 107 bytes. */
  get runDir(): string {
    const key = createHash("sha256").update(this.dataDir).digest("hex").slice(0, 16);
    return join(RUN_ROOT, key);
  }

  async connect(): Promise<SandboxdClient> {
    // Another process may have paused or killed it since: the pid check is one small read.
    if (this.state.kind === "running" && (await isAlive(this.state.run))) return this.state.client;
    if (this.state.kind === "killed")
      throw new SandboxError(`sandbox ${this.record.sandboxId} was killed`, "NOT_FOUND");
    if (this.state.kind === "running") await this.detach();
    // Running in another process's wake: attach. Paused (or never started): start sandboxd.
    this.starting ??= withStartLock(this.dir, this.provider.options.startTimeoutMs, () =>
      this.attachOrStart(),
    ).finally(() => (this.starting = null));
    return this.starting;
  }

  private async attachOrStart(): Promise<SandboxdClient> {
    let run = await readRun(this.dir);
    if (!run || !(await isAlive(run))) {
      if (!(await fs.stat(this.dir).catch(() => null)))
        throw new SandboxError(`sandbox ${this.record.sandboxId} was killed`, "NOT_FOUND");
      if (run) await this.cleanUp(run);
      run = await this.provider.spawnSandboxd(this);
      await writeRun(this.dir, run);
    }
    const client = new SandboxdClient({
      baseUrl: "http://sandboxd",
      socketPath: run.socketPath,
      token: run.token,
    });
    this.attached(run, client);
    return client;
  }

  /** This process reaches sandboxd `run` through `client` (started, attached or adopted). */
  attached(run: RunRecord, client: SandboxdClient): void {
    this.state = { kind: "running", client, run };
  }

  /** Lets go of sandboxd in this process (connections, forwards); sandboxd keeps running. */
  async detach(): Promise<void> {
    await this.starting?.catch(() => undefined);
    await this.forwarder.close();
    if (this.state.kind !== "running") return;
    const { client } = this.state;
    this.state = { kind: "stopped" };
    await client.destroy();
  }

  /** Whether a sandboxd serves this sandbox now, started by this process or any other. */
  async running(): Promise<boolean> {
    if (this.state.kind === "running" && (await isAlive(this.state.run))) return true;
    const run = await readRun(this.dir);
    return run !== null && (await isAlive(run));
  }

  async pause(): Promise<void> {
    if (this.state.kind === "killed")
      throw new SandboxError(`sandbox ${this.record.sandboxId} was killed`, "NOT_FOUND");
    await this.detach();
    // Whichever process started it, the run file names it.
    await withStartLock(this.dir, this.provider.options.startTimeoutMs, async () => {
      const run = await readRun(this.dir);
      if (run) await this.cleanUp(run);
    });
  }

  /** Stops the run file's sandboxd (if still that process) and removes what it left. */
  private async cleanUp(run: RunRecord): Promise<void> {
    await stopDetached(run);
    await removeRun(this.dir);
    // The socket's directory goes with the process that listened in it (a warm one's has its
    // key). Only a directory of the run root: the run file is read from disk, and one naming
    // any other place (a forged or corrupt record) must not get that place deleted.
    const socketDir = dirname(run.socketPath);
    if (dirname(socketDir) === RUN_ROOT) await fs.rm(socketDir, { recursive: true, force: true });
    if (socketDir !== this.runDir) await fs.rm(this.runDir, { recursive: true, force: true });
  }

  async kill(): Promise<void> {
    if (this.state.kind === "killed") return;
    await this.pause();
    this.state = { kind: "killed" };
    this.provider.forget(this.record.sandboxId);
    // A sandbox that started warm keeps its data where its sandboxd's root was (see ./warm-pool.ts).
    const data = await this.provider.warmDataOf(this.dataDir);
    await fs.rm(this.dir, { recursive: true, force: true });
    if (data) await fs.rm(data, { recursive: true, force: true });
  }

  /** Same network: the port itself. In a private network namespace: a tunnel through sandboxd. */
  async getHost(port: number): Promise<string> {
    await this.connect();
    if (this.provider.isolation === "bwrap" && this.provider.networkOf(this.record) === "deny")
      return this.forwarder.forward(port);
    return `127.0.0.1:${port}`;
  }

  async setTimeout(timeoutMs: number): Promise<void> {
    if (this.state.kind === "killed")
      throw new SandboxError(`sandbox ${this.record.sandboxId} was killed`, "NOT_FOUND");
    this.record.expiresAt = new Date(Date.now() + timeoutMs).toISOString();
    await writeRecord(this.dir, this.record);
    this.provider.startReaper();
  }

  async info(): Promise<SandboxInfo> {
    if (this.state.kind === "killed")
      throw new SandboxError(`sandbox ${this.record.sandboxId} was killed`, "NOT_FOUND");
    return recordInfo(this.record, (await this.running()) ? "running" : "paused");
  }
}

export class LocalProvider implements SandboxProvider {
  readonly options: z.output<typeof LocalProviderOptions>;
  private readonly logger: Logger | undefined;
  private readonly sandboxes = new Map<string, Promise<LocalSandbox>>();
  private interpreters: Promise<Interpreters> | null = null;
  private resolvedIsolation: Promise<"bwrap" | "none"> | null = null;
  private reaper: NodeJS.Timeout | null = null;
  /** Null when the pool size is 0. */
  private readonly pool: WarmPool | null;
  /** Known once the first sandbox started. */
  isolation: "bwrap" | "none" | undefined;

  constructor(options: LocalProviderOptions = {}, logger?: Logger) {
    this.options = parseOptions(LocalProviderOptions, options, "local provider options");
    this.logger = logger;
    const size = warmPoolSize(this.options.warm);
    this.pool =
      size === 0
        ? null
        : new WarmPool({
            size,
            dataRoot: join(this.options.baseDir, "data"),
            runRoot: RUN_ROOT,
            logger,
            spawn: ({ key, dataDir, runDir, onSpawn }) =>
              this.startSandboxd({
                label: `warm sandboxd ${key}`,
                dataDir,
                runDir,
                logPath: join(dirname(dataDir), "sandboxd.log"),
                envs: {},
                network: this.options.network,
                mounts: undefined,
                onSpawn,
              }),
          });
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    const o = validateCreate(options);
    const bwrap = (await this.isolationMode()) === "bwrap";
    const noBwrap = "needs bubblewrap isolation";
    refuseUnsupported(
      "local",
      o,
      {
        ttl: true,
        idleTimeout: true,
        labels: true,
        networkInternet: true,
        networkDeny: bwrap,
        mounts: bwrap,
        readOnlyMounts: bwrap,
      },
      {
        networkDeny: noBwrap,
        mounts: noBwrap,
        cpu: "no cgroup delegation for host processes",
        memory: "no cgroup delegation for host processes",
        disk: "the sandbox's directory is on the host's filesystem",
        template: "sandboxes run on the host's system, there is no image to choose",
        networkAllow: "bubblewrap has a network namespace or none, no per-destination filter",
      },
    );
    for (const m of o.mounts ?? []) {
      if (!m.source.startsWith("/") || !(await fs.stat(m.source).catch(() => null)))
        throw new SandboxError(
          `mount source ${JSON.stringify(m.source)} must be an existing absolute host path`,
          "INVALID_ARGUMENT",
        );
    }
    const userId = o.userId ?? "default";
    const threadId = o.threadId ?? randomUUID();
    const sandboxId = `${userId}.${threadId}`;
    let fresh = false;
    const pending =
      this.sandboxes.get(sandboxId) ??
      (async () => {
        const dir = this.sandboxDir(userId, threadId);
        const existing = await readRecord(dir);
        if (existing) return new LocalSandbox(this, dir, existing);
        fresh = true;
        const record: SandboxRecord = {
          sandboxId,
          language: o.language,
          envs: o.envs ?? {},
          workingDirectory: o.workingDirectory,
          timeoutMs: o.timeoutMs,
          createdAt: new Date().toISOString(),
          ...(o.labels ? { labels: o.labels } : {}),
          ...(o.lifetime?.ttlMs
            ? { expiresAt: new Date(Date.now() + o.lifetime.ttlMs).toISOString() }
            : {}),
          ...(o.lifetime?.idleTimeoutMs ? { idleTimeoutMs: o.lifetime.idleTimeoutMs } : {}),
          ...(typeof o.network === "string" ? { network: o.network } : {}),
          ...(o.mounts?.length ? { mounts: o.mounts } : {}),
        };
        // A warm process fits when nothing fixed at its start differs: network and mounts are
        // bubblewrap's namespace, set before sandboxd runs; the environment goes through init.
        const warm =
          !o.mounts?.length && record.network === undefined ? this.pool?.take() : undefined;
        const made = warm
          ? await this.createWarm(dir, record, warm)
          : await this.createCold(dir, record);
        if (made) return made;
        // Another process made this thread's sandbox at the same moment: it is that one.
        fresh = false;
        return this.madeElsewhere(dir, record);
      })();
    this.sandboxes.set(sandboxId, pending);
    let sandbox: LocalSandbox;
    try {
      sandbox = await pending;
    } catch (err) {
      this.sandboxes.delete(sandboxId);
      throw err;
    }
    try {
      const client = await sandbox.connect();
      if (o.workingDirectory) await client.mkdir(o.workingDirectory);
      if (o.packages?.length)
        await client.installPackages({ language: o.language, packages: o.packages });
    } catch (err) {
      // A sandbox that never became usable is not left behind.
      if (fresh) await sandbox.kill().catch(() => undefined);
      throw err;
    }
    this.startReaper();
    // Not at once: a process that creates one sandbox and exits never starts a warm one.
    if (fresh) this.pool?.scheduleFill();
    return this.instance(sandbox);
  }

  /*
   * A fresh thread's sandbox. Its `user-data` entry is the claim on the thread: made exclusively
   * (a symlink to a warm process's data, or a directory), so of two processes creating the same
   * thread at the same moment one makes it and the other gets null and waits for its record.
   */

  /** On a warm process: adopted before the record is written (see adopt()). */
  private async createWarm(
    dir: string,
    record: SandboxRecord,
    warm: WarmProcess,
  ): Promise<LocalSandbox | null> {
    try {
      mkdirSync(dir, { recursive: true });
      if (!madeFirst(() => symlinkSync(warm.dataDir, join(dir, "user-data")))) {
        await this.pool!.discard(warm);
        return null;
      }
    } catch (err) {
      await this.pool!.discard(warm);
      throw err;
    }
    const sandbox = new LocalSandbox(this, dir, record);
    const adopted = await this.adopt(warm, sandbox);
    // Not adopted (the process died): the first connect starts one on the same data.
    if (adopted) sandbox.attached(adopted.run, adopted.client);
    try {
      await writeRecord(dir, record);
    } catch (err) {
      await sandbox.kill().catch(() => undefined);
      throw err;
    }
    return sandbox;
  }

  /** Started by the first connect, under the start lock. */
  private async createCold(dir: string, record: SandboxRecord): Promise<LocalSandbox | null> {
    mkdirSync(dir, { recursive: true });
    if (!madeFirst(() => mkdirSync(join(dir, "user-data")))) return null;
    mkdirSync(join(dir, "user-data", ".sandpit", "home"), { recursive: true });
    await writeRecord(dir, record);
    return new LocalSandbox(this, dir, record);
  }

  /**
   * The sandbox another process is making for this thread, once its record is written. A maker
   * that died before writing it left only the data: this create finishes the sandbox with its own
   * record, and the first connect attaches to (or starts) sandboxd under the start lock.
   */
  private async madeElsewhere(dir: string, record: SandboxRecord): Promise<LocalSandbox> {
    const until = Date.now() + this.options.startTimeoutMs;
    for (;;) {
      const made = await readRecord(dir);
      if (made) return new LocalSandbox(this, dir, made);
      if (Date.now() >= until) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await writeRecord(dir, record);
    return new LocalSandbox(this, dir, record);
  }

  /**
   * Starts the warm pool's processes (untimed set-up for callers that want the first create to be
   * a claim too); creates refill it in the background on their own.
   */
  fillWarmPool(): Promise<void> {
    return this.pool?.fill() ?? Promise.resolve();
  }

  /** The warm pool's unclaimed processes (diagnostics and tests). */
  get warmProcesses(): readonly WarmProcess[] {
    return this.pool?.processes ?? [];
  }

  /**
   * Adopts a warm process for a fresh sandbox: the run file, and the sandbox's environment in a
   * `/v1/init` when it has one. The token stays the one this process drew when it started the
   * warm process and passed on its stdin: no other process has ever held it, so there is nothing
   * to revoke, and a create without an environment makes no round trip at all. Both are done
   * before the sandbox's record exists, so whoever finds the record finds sandboxd ready: the
   * claim takes no start lock. Null when the process is no longer usable: it is stopped and the
   * create starts one cold, on the same data directory.
   */
  async adopt(
    warm: WarmProcess,
    sandbox: LocalSandbox,
  ): Promise<{ run: RunRecord; client: SandboxdClient } | null> {
    const { run } = warm;
    const env = sandbox.record.envs;
    try {
      // The run file goes out while init is on the wire.
      const [alive, init, written] = await Promise.allSettled([
        this.pool!.alive(warm),
        Object.keys(env).length > 0 ? warm.client.init({ token: run.token, env }) : undefined,
        writeRun(sandbox.dir, run),
      ]);
      if (alive.status === "fulfilled" && !alive.value) throw new Error("it exited");
      for (const r of [alive, init, written]) if (r.status === "rejected") throw r.reason;
    } catch (err) {
      this.logger?.warn({ err, pid: warm.run.pid }, "a warm local sandboxd could not be claimed");
      await removeRun(sandbox.dir);
      await this.releaseWarm(warm);
      return null;
    }
    return { run, client: warm.client };
  }

  /** Stops a warm process that was taken but not adopted; its data directory is the sandbox's now. */
  async releaseWarm(warm: WarmProcess): Promise<void> {
    await stopDetached(warm.run).catch(() => undefined);
    await warm.client.destroy().catch(() => undefined);
    await fs.rm(dirname(warm.run.socketPath), { recursive: true, force: true });
  }

  /** The data directory a warm-started sandbox's `user-data` links to, or null (see kill()). */
  async warmDataOf(dataDir: string): Promise<string | null> {
    // Whatever this provider's own pool size: the sandbox may have been claimed by another's.
    const real = await fs.realpath(dataDir).catch(() => null);
    const root = await fs.realpath(join(this.options.baseDir, "data")).catch(() => null);
    return real && root && dirname(dirname(real)) === root ? dirname(real) : null;
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    this.startReaper();
    const sandbox = await this.known(sandboxId);
    await sandbox.connect();
    return this.instance(sandbox);
  }

  /** Every sandbox in the state directory (any process's), read from the records alone. */
  async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wanted = validateListLabels(options?.labels);
    this.startReaper();
    const out: SandboxInfo[] = [];
    for (const dir of await sandboxDirs(this.options.baseDir)) {
      const record = await readRecord(dir).catch(() => null);
      if (!record || !hasLabels(record.labels ?? {}, wanted)) continue;
      if (expired(record)) {
        await this.expire(record.sandboxId).catch(() => undefined);
        continue;
      }
      const run = await readRun(dir);
      out.push(recordInfo(record, run && (await isAlive(run)) ? "running" : "paused"));
    }
    return out;
  }

  async get(sandboxId: string): Promise<SandboxInfo> {
    this.startReaper();
    return (await this.known(sandboxId)).info();
  }

  /** This process lets go of the sandbox (connections, port forwards); it keeps running. */
  async release(sandboxId: string): Promise<void> {
    await (await this.sandboxes.get(sandboxId)?.catch(() => undefined))?.detach();
  }

  /** The sandbox of an ID, from memory or its record; NOT_FOUND (and deleted) when expired. */
  private async known(sandboxId: string): Promise<LocalSandbox> {
    const [userId, threadId, ...rest] = typeof sandboxId === "string" ? sandboxId.split(".") : [];
    if (
      !userId ||
      !threadId ||
      rest.length ||
      !ID_PATTERN.test(userId) ||
      !ID_PATTERN.test(threadId)
    ) {
      throw new SandboxError(
        `${JSON.stringify(sandboxId)} is not a local sandbox ID (<user>.<thread>)`,
        "NOT_FOUND",
      );
    }
    let pending = this.sandboxes.get(sandboxId);
    if (!pending) {
      const dir = this.sandboxDir(userId, threadId);
      pending = readRecord(dir).then((record) => {
        if (!record) throw new SandboxError(`no local sandbox ${sandboxId}`, "NOT_FOUND");
        return new LocalSandbox(this, dir, record);
      });
      this.sandboxes.set(sandboxId, pending);
      pending.catch(() => this.sandboxes.delete(sandboxId));
    }
    const sandbox = await pending;
    if (expired(sandbox.record)) {
      await this.expire(sandboxId);
      throw new SandboxError(
        `local sandbox ${sandboxId} reached the end of its lifetime`,
        "NOT_FOUND",
      );
    }
    return sandbox;
  }

  /** Deletes a sandbox whose lifetime ended. */
  private async expire(sandboxId: string): Promise<void> {
    const [userId, threadId] = sandboxId.split(".") as [string, string];
    const dir = this.sandboxDir(userId, threadId);
    const pending =
      this.sandboxes.get(sandboxId) ??
      readRecord(dir).then((r) => (r ? new LocalSandbox(this, dir, r) : null));
    const sandbox = await pending.catch(() => null);
    this.logger?.info({ sandboxId }, "deleting a sandbox at the end of its lifetime");
    await sandbox?.kill();
  }

  /**
   * Enforces lifetimes while this process uses the provider: a sandbox past its end is deleted,
   * a running one idle past its idle timeout is stopped (files kept), whichever process started
   * it. The state directory is the shared truth, so any later process does this for sandboxes
   * that outlived the one that made them; lookups and lists check lifetimes on their own too.
   */
  startReaper(): void {
    if (this.reaper) return;
    this.reaper = setInterval(
      () =>
        void this.reap().catch((err: unknown) => this.logger?.warn({ err }, "local reaper failed")),
      REAP_EVERY_MS,
    );
    this.reaper.unref();
  }

  /** One pass of the reaper over the state directory; returns the IDs it deleted or stopped. */
  async reap(): Promise<string[]> {
    const acted: string[] = [];
    for (const dir of await sandboxDirs(this.options.baseDir)) {
      const record = await readRecord(dir).catch(() => null);
      if (!record) continue;
      if (expired(record)) {
        await this.expire(record.sandboxId);
        acted.push(record.sandboxId);
        continue;
      }
      if (!record.idleTimeoutMs) continue;
      const run = await readRun(dir);
      if (!run || !(await isAlive(run))) continue;
      const client = new SandboxdClient({
        baseUrl: "http://sandboxd",
        socketPath: run.socketPath,
        token: run.token,
      });
      const health = await client.health(2_000).catch(() => null);
      await client.close();
      if (health && health.idleMs >= record.idleTimeoutMs) {
        this.logger?.info({ sandboxId: record.sandboxId }, "stopping an idle sandbox");
        await (await this.known(record.sandboxId)).pause();
        acted.push(record.sandboxId);
      }
    }
    return acted;
  }

  /**
   * Lets go of every sandbox this process reached: connections and port forwards close, the
   * reaper stops; sandboxds keep running for later processes (`pause()` or `kill()` stop one).
   */
  async close(): Promise<void> {
    if (this.reaper) clearInterval(this.reaper);
    this.reaper = null;
    await this.pool?.close();
    const all = await Promise.allSettled(this.sandboxes.values());
    await Promise.all(
      all.map((s) =>
        s.status === "fulfilled" ? s.value.detach().catch(() => undefined) : undefined,
      ),
    );
  }

  forget(sandboxId: string): void {
    this.sandboxes.delete(sandboxId);
  }

  private instance(sandbox: LocalSandbox): SandboxInstance {
    return new SandboxdInstance(sandbox.record.sandboxId, sandbox, {
      language: sandbox.record.language,
      workingDirectory: sandbox.record.workingDirectory,
      timeoutMs: sandbox.record.timeoutMs,
    });
  }

  private sandboxDir(userId: string, threadId: string): string {
    return join(this.options.baseDir, "users", userId, "threads", threadId);
  }

  /** "deny" (a private network namespace) or "internet": the sandbox's own, else the provider's. */
  networkOf(record: SandboxRecord): "deny" | "internet" {
    return record.network ?? (this.options.network ? "internet" : "deny");
  }

  /** The isolation sandboxes get here: bubblewrap when usable (and not turned off), else none. */
  isolationMode(): Promise<"bwrap" | "none"> {
    this.resolvedIsolation ??= this.decideIsolation();
    return this.resolvedIsolation;
  }

  /**
   * Host execution is never a fallback: without bubblewrap a sandbox would be a plain process
   * of the calling user, able to read everything that user can. It happens only when asked for
   * by name (isolation "none"), as DeerFlow's allow_host_bash is; otherwise no sandbox starts.
   */
  private async decideIsolation(): Promise<"bwrap" | "none"> {
    const wanted = isolationWanted(this.options.isolation);
    if (wanted === "none") {
      this.logger?.warn(
        "isolation 'none': local sandboxes run as plain host processes of this user, without namespace isolation",
      );
      return "none";
    }
    if (await bwrapAvailable()) return "bwrap";
    throw new SandboxError(
      `local sandboxes need bubblewrap, which is not usable here${wanted === "bwrap" ? " (isolation 'bwrap' was asked for)" : ""}: ` +
        "install it (apt-get install bubblewrap) and allow unprivileged user namespaces; " +
        "or run sandboxes as plain host processes, for code you trust, with isolation 'none' (SANDPIT_LOCAL_ISOLATION=none)",
      // As for a provider that cannot be reached: a fallback chain moves on to its next one.
      "CONNECTION_FAILED",
    );
  }

  /**
   * Starts sandboxd for one sandbox (inside bubblewrap when isolating), detached: its own session
   * and process group, the token handed over on stdin which then closes, its log in
   * `sandboxd.log` beside the record. Waits for the ready line. The socket lives in a short
   * per-sandbox directory: unix socket paths are limited to 107 bytes, which a deep baseDir
   * would exceed.
   */
  async spawnSandboxd(sandbox: LocalSandbox): Promise<RunRecord> {
    const { run } = await this.startSandboxd({
      label: `sandboxd for ${sandbox.record.sandboxId}`,
      dataDir: sandbox.dataDir,
      runDir: sandbox.runDir,
      logPath: join(sandbox.dir, "sandboxd.log"),
      envs: sandbox.record.envs,
      network: this.networkOf(sandbox.record) === "internet",
      mounts: sandbox.record.mounts,
    });
    return run;
  }

  /** Starts one sandboxd of the given shape (see spawnSandboxd); the warm pool's use it too. */
  async startSandboxd(shape: SpawnShape): Promise<{ run: RunRecord; child: ChildProcess }> {
    this.interpreters ??= discoverInterpreters(process.env);
    const [isolation, interp] = await Promise.all([this.isolationMode(), this.interpreters]);
    this.isolation = isolation;
    const token = randomBytes(32).toString("hex");
    const { runDir, dataDir } = shape;
    await fs.mkdir(runDir, { recursive: true, mode: 0o700 });
    const bwrap = isolation === "bwrap";
    const env = {
      ...scrubEnv(process.env),
      SANDBOXD_LISTEN: `unix:${bwrap ? RUN_MOUNT : runDir}/sandboxd.sock`,
      SANDBOXD_ROOT: bwrap ? VIRTUAL_ROOT : dataDir,
      SANDBOXD_TOKEN_STDIN: "detached",
      SANDBOXD_ENV: JSON.stringify({
        HOME: `${bwrap ? VIRTUAL_ROOT : dataDir}/.sandpit/home`,
        ...shape.envs,
      }),
      SANDBOXD_PYTHON: interp.python,
      SANDBOXD_PYTHON_PREFIX: interp.pythonPrefix,
      SANDBOXD_LOG_LEVEL: "warn",
      ...(this.options.outputCapBytes
        ? { SANDBOXD_OUTPUT_CAP_BYTES: String(this.options.outputCapBytes) }
        : {}),
    };
    const argv = [process.execPath, SANDBOXD_MAIN];
    const [file, ...args] = bwrap
      ? [
          "bwrap",
          ...(await bwrapArgs({
            dataDir,
            virtualRoot: VIRTUAL_ROOT,
            runDir,
            runMount: RUN_MOUNT,
            network: shape.network,
            mounts: shape.mounts,
            readOnly: [
              dirname(dirname(interp.node)),
              interp.pythonPrefix,
              ...(await sandboxdCodeDirs()),
            ],
          })),
          "--",
          ...argv,
        ]
      : argv;
    const logPath = shape.logPath;
    const log = await fs.open(logPath, "w", 0o600);
    const child = spawn(file!, args, {
      env,
      detached: true,
      stdio: ["pipe", "pipe", log.fd],
    });
    await log.close();
    if (child.pid) shape.onSpawn?.(child.pid);
    const stdout = child.stdout!;
    child.stdin!.end(token + "\n");
    await new Promise<void>((resolve, reject) => {
      const fail = (why: string) => {
        child.kill("SIGKILL");
        void fs
          .readFile(logPath, "utf8")
          .catch(() => "")
          .then((stderr) =>
            reject(
              new SandboxError(
                `${shape.label} did not start: ${why}${stderr ? `\n${stderr.slice(-4000)}` : ""}`,
                "CONNECTION_FAILED",
              ),
            ),
          );
      };
      const timer = setTimeout(
        () => fail(`no ready line within ${this.options.startTimeoutMs} ms`),
        this.options.startTimeoutMs,
      );
      child.once("error", (e) => fail(e.message));
      child.once("exit", (code) => fail(`exited with code ${code}`));
      createInterface({ input: stdout }).once("line", (line) => {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        if (line.includes('"ready":true')) return resolve();
        fail(`unexpected first line ${JSON.stringify(line.slice(0, 200))}`);
      });
    });
    // sandboxd writes nothing after its ready line: this process may now exit without it.
    stdout.destroy();
    child.unref();
    const startTime = await startTimeOf(child.pid!);
    if (!startTime) {
      throw new SandboxError(`${shape.label} exited right after starting`, "CONNECTION_FAILED");
    }
    return {
      run: {
        pid: child.pid!,
        startTime,
        isolation,
        socketPath: join(runDir, "sandboxd.sock"),
        token,
      },
      child,
    };
  }
}
