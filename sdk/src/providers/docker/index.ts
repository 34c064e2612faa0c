/**
 * The Docker provider: one container of the Sandpit sandbox image per (user, thread), running
 * sandboxd, reached on a published 127.0.0.1 port with a per-sandbox token through the shared
 * sandboxd client.
 *
 * - Names are deterministic (`<prefix>-<sha256(user:thread)[:16]>`), so any process finds and
 *   adopts the same container; when two processes race to create it, the loser adopts.
 * - Host ports come from a range; a port taken by something else is retried (10 attempts).
 * - Tokens are derived on the host from a key in the state directory; a container holds only
 *   its token's digest (./tokens.ts).
 * - Released or idle containers stay running for their thread until the idle reaper stops them
 *   (data kept), which sandboxd does itself so that no work is cut (./drain.ts); `warm` blank
 *   containers are claimed by new threads without a cold start. Lifetimes end sandboxes, stopped
 *   ones too, whichever process looks (./lifetime.ts).
 * - `maxRunning` caps running sandboxes across processes (./capacity.ts).
 * - Containers are confined: CPU, memory and pids limits, all capabilities dropped,
 *   no-new-privileges, read-only root with a writable volume at /mnt/user-data and a tmpfs /tmp.
 */
import { createHash, randomBytes } from "node:crypto";
import { chmod, mkdir, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import type { Logger } from "../../logger.ts";
import { z } from "zod";
import { DockerProviderOptions } from "./options.ts";
import { DRAINED_EXIT_CODE, ID_PATTERN, VIRTUAL_ROOT } from "@sandpit/sandboxd/wire";
import { validateCreate, validateListLabels } from "../../create-options.ts";
import { hasLabels, refuseUnsupported } from "../../platform-options.ts";
import { SandboxError, isSandboxError } from "../../errors.ts";
import { parseOptions } from "../../parse-options.ts";
import { SandboxdClient, isDrainRefusal } from "../../sandboxd-client.ts";
import { SandboxdInstance, withClient, type SandboxdLifecycle } from "../../sandboxd-instance.ts";
import { PortForwarder } from "../../port-forward.ts";
import type {
  SandboxCreateOptions,
  SandboxInfo,
  SandboxInstance,
  SandboxListOptions,
  SandboxProvider,
  SandboxState,
} from "../../types.ts";
import { ClaimedLabels } from "./claimed-labels.ts";
import { SandboxdRecords } from "./sandboxd-records.ts";
import { LIFETIME_LABEL, LifetimeOverrides } from "./lifetime.ts";
import { TokenKeys, type SandboxTokens } from "./tokens.ts";
import { RunningCap } from "./capacity.ts";
import { Drainer } from "./drain.ts";
import { clientAt, health } from "./endpoint.ts";
import { detectRuntime } from "./detect.ts";
import {
  NameConflictError,
  PortConflictError,
  type ContainerInfo,
  type ContainerRuntime,
  type ContainerSpec,
} from "./runtime.ts";

// dockerode loads with the first engine call (./detect.ts), not here; but an installation
// without it should still hear so where the provider loads (factories.ts names the package), so
// it is looked up, not loaded.
createRequire(import.meta.url).resolve("dockerode");

/** Re-exported so the provider's entry point carries its options schema. */
export { DockerProviderOptions };

const LABEL = {
  managed: "sandpit.dev/managed",
  user: "sandpit.dev/user",
  thread: "sandpit.dev/thread",
  warm: "sandpit.dev/warm",
  /** The keys of the caller's labels (the image's own labels are on the container too). */
  labels: "sandpit.dev/labels",
  /** The host port a container publishes, kept on it so listing ports needs no inspect. */
  port: "sandpit.dev/port",
} as const;
/** How often waitReady asks sandboxd whether it is up (a fixed, short interval: no backoff). */
const READY_POLL_MS = 10;
/** A claimed warm container is replaced after this delay, not while its claimer runs its first command. */
const REFILL_DELAY_MS = 250;
const RECORD_PATH = `${VIRTUAL_ROOT}/.sandpit/sandbox.json`;
const PORT_ATTEMPTS = 10;
/** How often the reaper looks when some sandbox has a lifetime or an idle timeout of its own. */
const LIFETIME_REAP_MS = 1_000;
/**
 * How often it looks for lifetimes when nothing else sets its pace (no idle timeout): sandboxes
 * another process gave a lifetime end even when no process that knows of it still runs.
 */
const LIFETIME_SCAN_MS = 60_000;
/** The first look, this long after the provider first reached the engine. */
const FIRST_REAP_MS = 1_000;

/** What one container is made of, from the provider's defaults and the create options. */
interface ContainerShape {
  labels: Record<string, string>;
  envs: Record<string, string>;
  image: string;
  cpus: number;
  memoryBytes: number;
  /** false: network "none", sandboxd on a unix socket. */
  network: boolean;
  binds: { source: string; target: string; readOnly?: boolean | undefined }[];
}

/** A warm container ready to claim: with its inspect and warmed client when this process started it. */
interface WarmContainer {
  name: string;
  info: ContainerInfo | null;
  client: SandboxdClient | null;
}

/** What a claim hands a warm container's sandboxd, through the client that warmed it if any. */
interface Claim {
  env: Record<string, string>;
  client?: SandboxdClient | undefined;
}

interface SandboxRecord {
  workingDirectory?: string | undefined;
  timeoutMs?: number | undefined;
}

/** One container, shared by every instance object handed out for it in this process. */
class DockerSandbox implements SandboxdLifecycle {
  readonly name: string;
  private readonly provider: DockerProvider;
  private client: SandboxdClient | null = null;
  /** Null for a sandbox reached through its sandboxd record, with no engine call made. */
  private container: ContainerInfo | null;
  private connecting: Promise<SandboxdClient> | null = null;
  /**
   * The inspect this object was adopted from, used by the first connect instead of inspecting
   * again: create and resume connect right after the inspect (or run) that found the container.
   */
  private adoptedFrom: ContainerInfo | null;
  private readonly forwarder = new PortForwarder(() => this.connect());
  record: SandboxRecord = {};

  constructor(provider: DockerProvider, name: string, info: ContainerInfo | null) {
    this.provider = provider;
    this.name = name;
    this.container = info;
    this.adoptedFrom = info;
  }

  /** A sandbox reached through its sandboxd record: `client` was just seen to answer. */
  static recorded(
    provider: DockerProvider,
    name: string,
    client: SandboxdClient,
    record: SandboxRecord,
  ): DockerSandbox {
    const s = new DockerSandbox(provider, name, null);
    s.client = client;
    s.record = record;
    return s;
  }

  connect(): Promise<SandboxdClient> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= this.reconnect().finally(() => (this.connecting = null));
    return this.connecting;
  }

  /**
   * Takes a claimed warm container without another inspect, handing its sandboxd the thread's
   * token and environment: through the client that warmed it up when this process started it.
   * Its sandboxd record is for later processes, so it is written after the claim answers.
   */
  async connectReady(info: ContainerInfo, claim: Claim): Promise<SandboxdClient> {
    this.container = info;
    this.adoptedFrom = null;
    this.client = await this.provider.waitReady(info, claim);
    this.provider.inBackground(this.provider.remember(info));
    return this.client;
  }

  /**
   * Connects, first checking that a client this object holds still answers: another handle
   * (or process, or the reaper) may have stopped the container meanwhile.
   */
  async ensureRunning(): Promise<SandboxdClient> {
    if (
      this.client &&
      !(await this.client.health(2_000).then(
        () => true,
        () => false,
      ))
    )
      await this.dropClient();
    return this.connect();
  }

  /** Finds the container again, starting it when paused or stopped by the reaper. */
  private async reconnect(): Promise<SandboxdClient> {
    const rt = await this.provider.runtime();
    let info = this.adoptedFrom ?? (await rt.inspect(this.name));
    this.adoptedFrom = null;
    if (!info)
      throw new SandboxError(
        `sandbox ${this.name} does not exist (its container was removed)`,
        "NOT_FOUND",
      );
    const starting = !info.running;
    if (starting) {
      await this.provider.cap.admit(rt, this.name);
      info = await rt.start(this.name);
    }
    this.container = info;
    this.client = await this.provider.waitReady(info);
    if (starting) {
      try {
        // Given way to another start over the cap: stopped again, its data kept.
        await this.provider.cap.settle(rt, this.name, () => this.provider.drainNamed(this.name));
      } catch (err) {
        await this.dropClient();
        throw err;
      }
    }
    await this.provider.remember(info);
    return this.client;
  }

  async diagnose(err: SandboxError): Promise<SandboxError> {
    await this.dropClient();
    const info = await (await this.provider.runtime()).inspect(this.name).catch(() => undefined);
    if (info === null)
      return new SandboxError(
        `sandbox ${this.name} is gone: its container was removed`,
        "NOT_FOUND",
        err,
      );
    if (info && !info.running) {
      return new SandboxError(
        `sandbox ${this.name}'s container stopped (${info.state}); the next call starts it again`,
        "CONNECTION_FAILED",
        err,
      );
    }
    return err;
  }

  /**
   * Whether sandboxd ran none of a call that failed with `err` because it drained (the idle
   * reaper, a capacity eviction): refused by a draining sandboxd; or cut off by, or never
   * reaching, one that exited drained and had started before the call went out, so that it was
   * the sandboxd the call went to. The container has stopped then; the next connect starts it.
   */
  async recover(err: SandboxError, sentAt: number | undefined): Promise<boolean> {
    const refused = isDrainRefusal(err);
    if (!refused && err.code !== "CONNECTION_FAILED") return false;
    await this.dropClient();
    const info = await this.provider.whenStopped(this.name, refused);
    if (!info || info.running) return false;
    if (refused) return true;
    return (
      info.exitCode === DRAINED_EXIT_CODE &&
      (sentAt === undefined || (!!info.startedAt && info.startedAt.getTime() <= sentAt))
    );
  }

  async pause(): Promise<void> {
    await this.dropClient();
    await (await this.provider.runtime()).stop(this.name);
  }

  async kill(): Promise<void> {
    await this.forwarder.close();
    await this.dropClient();
    const rt = await this.provider.runtime();
    const info = await rt.inspect(this.name);
    await rt.remove(this.name, info?.volume ?? this.container?.volume ?? `${this.name}-data`);
    await this.provider.removeHostState(this.name);
    this.provider.forget(this.name);
  }

  /** Only sandboxd's port is published; other servers are reached through its tunnel. */
  async getHost(port: number): Promise<string> {
    return this.forwarder.forward(port);
  }

  async setTimeout(timeoutMs: number): Promise<void> {
    await this.provider.get(this.name); // NOT_FOUND once the container is gone
    await this.provider.lifetimes.set(this.name, Date.now() + timeoutMs);
    this.provider.startReaper(true);
  }

  info(): Promise<SandboxInfo> {
    return this.provider.get(this.name);
  }

  /** Reads the defaults create() stored in the sandbox (working directory, timeout). */
  async loadRecord(): Promise<void> {
    this.record = await withClient(this, readRecord).catch((err: unknown) => {
      if (isSandboxError(err, "CAPACITY_EXCEEDED")) throw err; // it could not be started
      return {};
    });
  }

  /** Closes port forwards and connections; the container keeps running (released, warm). */
  async release(): Promise<void> {
    await this.forwarder.close();
    await this.dropClient();
  }

  async dropClient(): Promise<void> {
    this.adoptedFrom = null; // whatever comes next (a pause, the reaper) makes it stale
    const c = this.client;
    this.client = null;
    await c?.close().catch(() => undefined);
  }
}

export class DockerProvider implements SandboxProvider {
  readonly options: z.output<typeof DockerProviderOptions>;
  private readonly logger: Logger | undefined;
  private rt: Promise<ContainerRuntime> | null = null;
  private readonly sandboxes = new Map<string, Promise<DockerSandbox>>();
  private reaper: NodeJS.Timeout | null = null;
  private firstReap: NodeJS.Timeout | null = null;
  /** The reaper's pass under way: passes never overlap. */
  private reaping: Promise<string[]> | null = null;
  private warmFill: Promise<void> | null = null;
  /** Ports handed out by this process and not yet seen in use (they may still be starting). */
  private readonly recentPorts = new Set<number>();
  /** The image was seen once; it is not looked up on every create. */
  private imageChecked = false;
  /** Warm containers this process started and nobody claimed yet (others are found by listing). */
  private readonly warmReady: WarmContainer[] = [];
  /** Work started after answering a create (host records), awaited by close(). */
  private readonly background = new Set<Promise<unknown>>();
  private refill: NodeJS.Timeout | null = null;
  private reapEveryMs = 0;
  readonly lifetimes: LifetimeOverrides;
  readonly claimed: ClaimedLabels;
  private readonly sandboxds: SandboxdRecords;
  private readonly tokens: TokenKeys;
  readonly cap: RunningCap;
  private readonly drainer: Drainer;

  constructor(options: DockerProviderOptions = {}, logger?: Logger) {
    this.options = parseOptions(DockerProviderOptions, options, "docker provider options");
    this.logger = logger;
    this.lifetimes = new LifetimeOverrides(this.options.stateDir);
    this.claimed = new ClaimedLabels(this.options.stateDir);
    this.sandboxds = new SandboxdRecords(this.options.stateDir);
    this.tokens = new TokenKeys(this.options.stateDir);
    this.drainer = new Drainer({ runtime: () => this.runtime(), tokens: this.tokens, logger });
    this.cap = new RunningCap({
      ...this.options,
      logger,
      drainIfIdle: (c, minIdleMs) => this.drainIfIdle(c, minIdleMs),
      health,
    });
  }

  /** The container engine, detected once; CONNECTION_FAILED when none answers. */
  runtime(): Promise<ContainerRuntime> {
    this.rt ??= detectRuntime(this.options, this.logger).then(
      (rt) => {
        // Lifetimes are the engine's (labels) and the state directory's, not this process's:
        // one look soon finds those other processes set, however this one is used.
        this.startReaper();
        this.firstReap ??= setTimeout(() => this.reapInBackground(), FIRST_REAP_MS);
        this.firstReap.unref();
        return rt;
      },
      (err: unknown) => {
        this.rt = null; // try again next time: the engine may have been started meanwhile
        throw err;
      },
    );
    return this.rt;
  }

  /** The container name (and sandbox ID) of a thread: stable across processes. */
  containerName(userId: string, threadId: string): string {
    const hash = createHash("sha256").update(`${userId}:${threadId}`).digest("hex").slice(0, 16);
    return `${this.options.containerPrefix}-${hash}`;
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    const o = validateCreate(options);
    refuseUnsupported(
      "docker",
      o,
      {
        ttl: true,
        idleTimeout: true,
        cpu: true,
        memory: true,
        template: true,
        labels: true,
        networkDeny: true,
        networkInternet: true,
        mounts: true,
        readOnlyMounts: true,
      },
      {
        disk: "the data volume's driver has no size limit",
        networkAllow: "Docker networks have no per-destination egress filter",
      },
    );
    const rt = await this.runtime();
    if (!this.imageChecked && !(this.imageChecked = await rt.imageExists(this.options.image))) {
      throw new SandboxError(
        `the sandbox image ${this.options.image} is not present: build it with \`node images/build.ts\``,
        "EXECUTION_FAILED",
      );
    }
    if (o.template && !(await rt.imageExists(o.template)))
      throw new SandboxError(
        `template: the image ${o.template} is not present on the engine (pull or build it first)`,
        "INVALID_ARGUMENT",
      );
    this.startReaper(!!(o.lifetime?.ttlMs || o.lifetime?.idleTimeoutMs));
    const userId = o.userId ?? "default";
    const threadId = o.threadId ?? randomBytes(8).toString("hex");
    const name = this.containerName(userId, threadId);
    let fresh = false;
    const pending =
      this.sandboxes.get(name) ??
      (async () => {
        const existing = await rt.inspect(name);
        if (existing && (await this.isExpired(existing))) {
          await this.removeContainer(existing);
        } else if (existing) {
          const adopted = this.adopt(existing);
          await adopted.loadRecord();
          return adopted;
        }
        fresh = true;
        // A warm container was made blank: one with an image, limits, network or mounts of
        // its own is made for this create. Labels and lifetimes a claim carries on the host.
        const plain = !o.template && !o.resources && !o.network && !o.mounts;
        const labels = this.createLabels(userId, threadId, o);
        await this.cap.admit(rt, name);
        const made =
          (plain ? await this.claimWarm(rt, name, labels, o) : null) ??
          (await this.startNew(rt, name, labels, o));
        try {
          await made.connect();
        } catch (err) {
          await made.kill().catch(() => undefined); // this create made it, and it never answered
          throw err;
        }
        try {
          // Counted again once its sandboxd answers (so that it can be stopped): given way to
          // another start over the cap, it goes, since this create made it.
          await this.cap.settle(rt, name, () => this.undoCreate(rt, name));
        } catch (err) {
          await made.dropClient();
          throw err;
        }
        return made;
      })();
    this.sandboxes.set(name, pending);
    let sandbox: DockerSandbox;
    try {
      sandbox = await pending;
    } catch (err) {
      this.sandboxes.delete(name);
      throw err;
    }
    if (fresh) {
      try {
        sandbox.record = { workingDirectory: o.workingDirectory, timeoutMs: o.timeoutMs };
        // Each step may be made again (on a sandbox an idle reaper stopped meanwhile).
        await withClient(sandbox, async (client) => {
          if (o.workingDirectory || o.timeoutMs) {
            await client.writeFile(RECORD_PATH, JSON.stringify(sandbox.record));
          }
          if (o.workingDirectory) await client.mkdir(o.workingDirectory);
          if (o.packages?.length)
            await client.installPackages({ language: o.language, packages: o.packages });
        });
      } catch (err) {
        await sandbox.kill().catch(() => undefined);
        throw err;
      }
      if (this.options.warm > 0 && !this.refill) {
        this.refill = setTimeout(() => {
          this.refill = null;
          void this.fillWarmPool();
        }, REFILL_DELAY_MS);
        this.refill.unref();
      }
    }
    return this.instance(sandbox);
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    if (
      typeof sandboxId !== "string" ||
      !sandboxId.startsWith(`${this.options.containerPrefix}-`) ||
      !ID_PATTERN.test(sandboxId.replace(/\./g, "_"))
    ) {
      throw new SandboxError(
        `${JSON.stringify(sandboxId)} is not a docker sandbox ID`,
        "NOT_FOUND",
      );
    }
    let pending = this.sandboxes.get(sandboxId);
    if (!pending) {
      const known = await this.fromRecord(sandboxId);
      if (known) {
        this.sandboxes.set(sandboxId, Promise.resolve(known));
        return this.instance(known);
      }
    }
    const rt = await this.runtime();
    pending ??= this.sandboxes.get(sandboxId); // another resume may have adopted it meanwhile
    if (!pending) {
      pending = rt.inspect(sandboxId).then(async (info) => {
        if (!info) throw new SandboxError(`no docker sandbox ${sandboxId}`, "NOT_FOUND");
        if (await this.isExpired(info)) {
          await this.removeContainer(info);
          throw new SandboxError(
            `docker sandbox ${sandboxId} reached the end of its lifetime`,
            "NOT_FOUND",
          );
        }
        return this.adopt(info);
      });
      this.sandboxes.set(sandboxId, pending);
      pending.catch(() => this.sandboxes.delete(sandboxId));
    }
    const sandbox = await pending;
    try {
      await sandbox.ensureRunning(); // NOT_FOUND when the container went away meanwhile
    } catch (err) {
      if (err instanceof SandboxError && err.code === "NOT_FOUND") this.sandboxes.delete(sandboxId);
      throw err;
    }
    await sandbox.loadRecord();
    return this.instance(sandbox);
  }

  /**
   * A sandbox through its sandboxd record alone, when that sandboxd answers with the sandbox's
   * token: one request (reading the sandbox's stored defaults), no engine call. Null when there
   * is no record, the sandbox's lifetime is over (the engine path removes it), or the record is
   * stale (refused, wrong token, no answer): the engine path then finds the container, starts it
   * if it was stopped, and writes the record again.
   */
  private async fromRecord(name: string): Promise<DockerSandbox | null> {
    const rec = await this.sandboxds.read(name);
    if (!rec) return null;
    const labels: Record<string, string> = rec.expiresAt
      ? { [LIFETIME_LABEL.expiresAt]: rec.expiresAt }
      : {};
    const at = await this.lifetimes.expiresAt(name, labels);
    if (at !== undefined && at <= Date.now()) return null;
    const client = clientAt(rec.endpoint, rec.token);
    try {
      return DockerSandbox.recorded(this, name, client, await readRecord(client));
    } catch {
      await client.close().catch(() => undefined);
      return null;
    }
  }

  /** Keeps where a container's sandboxd answers for later processes (./sandboxd-records.ts). */
  async remember(info: ContainerInfo): Promise<void> {
    if (!info.endpoint) return;
    const { endpoint } = info;
    const expiresAt = (await this.claimed.of(info))[LIFETIME_LABEL.expiresAt];
    await (async () => {
      const token = (await this.tokens.of(info)).live;
      await this.sandboxds.write(info.name, { endpoint, token, expiresAt });
    })().catch(
      // Only a shortcut for later processes: a state directory that cannot be written costs
      // them the engine calls, not this one its sandbox.
      (err: unknown) =>
        this.logger?.warn({ err, container: info.name }, "could not keep sandboxd's address"),
    );
  }

  /** What the host keeps about a container beside the engine, removed with it. */
  async removeHostState(name: string): Promise<void> {
    await this.removeSocketDir(name);
    await this.lifetimes.remove(name);
    await this.claimed.remove(name);
    await this.sandboxds.remove(name);
  }

  /** This provider's sandboxes (running or stopped), from the engine alone: nothing is started. */
  async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wanted = validateListLabels(options?.labels);
    const rt = await this.runtime();
    const warm = `${this.options.containerPrefix}-warm-`;
    const out: SandboxInfo[] = [];
    for (const c of await rt.list(`${this.options.containerPrefix}-`)) {
      if (c.name.startsWith(warm) || c.labels[LABEL.managed] !== "true") continue;
      const info = await this.describe(c);
      if (hasLabels(info.labels, wanted)) out.push(info);
    }
    return out;
  }

  /** One container's info; a stopped one stays stopped. */
  async get(sandboxId: string): Promise<SandboxInfo> {
    const info =
      typeof sandboxId === "string" && sandboxId.startsWith(`${this.options.containerPrefix}-`)
        ? await (await this.runtime()).inspect(sandboxId)
        : null;
    if (!info || info.labels[LABEL.managed] !== "true")
      throw new SandboxError(`no docker sandbox ${JSON.stringify(sandboxId)}`, "NOT_FOUND");
    return this.describe(info);
  }

  private async describe(c: ContainerInfo): Promise<SandboxInfo> {
    const labels = await this.claimed.of(c);
    const expiresAt = await this.lifetimes.expiresAt(c.name, labels);
    const user = labels[LABEL.user];
    const thread = labels[LABEL.thread];
    return {
      sandboxId: c.name,
      provider: "docker",
      state: containerState(c),
      labels: Object.fromEntries(
        (labels[LABEL.labels] ?? "")
          .split(",")
          .filter((k) => k in labels)
          .map((k) => [k, labels[k]!]),
      ),
      ...(user ? { userId: user } : {}),
      ...(thread ? { threadId: thread } : {}),
      ...(c.image ? { template: c.image } : {}),
      ...(c.createdAt ? { createdAt: c.createdAt } : {}),
      ...(expiresAt ? { expiresAt: new Date(expiresAt) } : {}),
      resources: {
        ...(c.cpus ? { cpu: c.cpus } : {}),
        ...(c.memoryBytes ? { memoryMiB: Math.round(c.memoryBytes / 1048576) } : {}),
      },
    };
  }

  private async isExpired(c: ContainerInfo): Promise<boolean> {
    const at = await this.lifetimes.expiresAt(c.name, await this.claimed.of(c));
    return at !== undefined && at <= Date.now();
  }

  /** Removes a container with its volume, socket directory and lifetime. */
  private async removeContainer(c: ContainerInfo): Promise<void> {
    const mine = await this.sandboxes.get(c.name)?.catch(() => undefined);
    if (mine) return mine.kill();
    await (await this.runtime()).remove(c.name, c.volume);
    await this.removeHostState(c.name);
  }

  /** Lets go of a sandbox without stopping it: it stays warm for its thread until the reaper. */
  async release(sandboxId: string): Promise<void> {
    const sandbox = await this.sandboxes.get(sandboxId);
    await sandbox?.release();
    this.sandboxes.delete(sandboxId);
  }

  /** Stops the reaper and closes connections; containers keep running for the next process. */
  async close(): Promise<void> {
    if (this.reaper) clearInterval(this.reaper);
    if (this.refill) clearTimeout(this.refill);
    if (this.firstReap) clearTimeout(this.firstReap);
    this.reaper = this.refill = null;
    await this.reaping?.catch(() => undefined);
    await this.warmFill?.catch(() => undefined);
    await Promise.allSettled(this.background);
    for (const w of this.warmReady) await w.client?.close().catch(() => undefined);
    const all = await Promise.allSettled(this.sandboxes.values());
    await Promise.all(all.map((s) => (s.status === "fulfilled" ? s.value.release() : undefined)));
    this.sandboxes.clear();
  }

  forget(name: string): void {
    this.sandboxes.delete(name);
  }

  /** Runs `work` off a create's critical path; close() waits for it. */
  inBackground(work: Promise<unknown>): void {
    const p = work.catch(() => undefined).finally(() => this.background.delete(p));
    this.background.add(p);
  }

  /**
   * Waits for sandboxd to answer, then returns a client with the container's token (./tokens.ts).
   * A renamed (claimed warm) container's sandboxd starts with the token of the name it was
   * created under: it is handed the current one first, with the claim's environment on a claim.
   */
  async waitReady(info: ContainerInfo, claim?: Claim): Promise<SandboxdClient> {
    const tokens = await this.tokens.of(info);
    // A warm container this process started answers already, on the connection that warmed it
    // up: after the init that client carries the thread's token.
    if (claim?.client) {
      try {
        await claim.client.init({ token: tokens.live, env: claim.env });
      } catch (err) {
        await claim.client.close();
        throw err;
      }
      return claim.client;
    }
    const { endpoint, client } = await this.answering(info, tokens.live);
    try {
      if (claim || tokens.boot !== tokens.live) await handOver(endpoint, tokens, claim);
    } catch (err) {
      await client.close();
      throw err;
    }
    return client;
  }

  /** Polls sandboxd's /healthz until it answers; a client with `token` there. */
  private async answering(
    info: ContainerInfo,
    token: string,
  ): Promise<{ endpoint: string; client: SandboxdClient }> {
    const deadline = Date.now() + this.options.startTimeoutMs;
    let current = info;
    for (let attempt = 0; Date.now() < deadline; attempt++) {
      if (current.endpoint) {
        const client = clientAt(current.endpoint, token);
        try {
          await client.health(2_000);
          return { endpoint: current.endpoint, client };
        } catch {
          await client.close();
        }
      }
      await sleep(READY_POLL_MS);
      if (attempt % 50 === 49) {
        const again = await (await this.runtime()).inspect(info.name);
        if (!again)
          throw new SandboxError(`container ${info.name} disappeared while starting`, "NOT_FOUND");
        // "created": another process is still starting it. Anything else not running is final.
        if (!again.running && again.state !== "created") {
          throw new SandboxError(
            `container ${info.name} exited while starting (${again.state})`,
            "CONNECTION_FAILED",
          );
        }
        current = again;
      }
    }
    throw new SandboxError(
      `sandboxd in ${info.name} did not answer within ${this.options.startTimeoutMs} ms`,
      "CONNECTION_FAILED",
    );
  }

  private adopt(info: ContainerInfo): DockerSandbox {
    return new DockerSandbox(this, info.name, info);
  }

  /** The labels of a sandbox made by this create: on its container, or kept for its claim. */
  private createLabels(
    userId: string,
    threadId: string,
    o: SandboxCreateOptions,
  ): Record<string, string> {
    return {
      ...o.labels,
      ...(o.labels ? { [LABEL.labels]: Object.keys(o.labels).join(",") } : {}),
      [LABEL.managed]: "true",
      [LABEL.user]: userId,
      [LABEL.thread]: threadId,
      ...(o.lifetime?.ttlMs
        ? { [LIFETIME_LABEL.expiresAt]: String(Date.now() + o.lifetime.ttlMs) }
        : {}),
      ...(o.lifetime?.idleTimeoutMs
        ? { [LIFETIME_LABEL.idleTimeoutMs]: String(o.lifetime.idleTimeoutMs) }
        : {}),
    };
  }

  private async startNew(
    rt: ContainerRuntime,
    name: string,
    labels: Record<string, string>,
    o: SandboxCreateOptions,
  ): Promise<DockerSandbox> {
    const shape: ContainerShape = {
      ...this.defaultShape(),
      labels,
      envs: o.envs ?? {},
      ...(o.template ? { image: o.template } : {}),
      ...(o.resources?.cpu ? { cpus: o.resources.cpu } : {}),
      ...(o.resources?.memoryMiB ? { memoryBytes: o.resources.memoryMiB * 1048576 } : {}),
      ...(o.network ? { network: o.network === "internet" } : {}),
      binds: o.mounts ?? [],
    };
    let conflict: unknown;
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        return this.adopt(await this.runWithPortRetry(rt, name, shape));
      } catch (err) {
        if (!(err instanceof NameConflictError)) throw err;
        conflict = err;
      }
      // Another process holds this thread's name: adopt its container (connect waits for it to
      // start). The engine reserves a name before the container is visible, so look for a
      // while; if it never shows, that process's attempt failed and removed it: try again.
      for (let look = 0; look < 50; look++) {
        const theirs = await rt.inspect(name);
        if (theirs) return this.adopt(theirs);
        await sleep(100);
      }
    }
    throw new SandboxError(
      `could not create or adopt container ${name}: it kept appearing and vanishing`,
      "CONNECTION_FAILED",
      conflict,
    );
  }

  /** A blank container as the provider's options describe it. */
  private defaultShape(): ContainerShape {
    return {
      labels: {},
      envs: {},
      image: this.options.image,
      cpus: this.options.cpus,
      memoryBytes: this.options.memoryMb * 1024 * 1024,
      network: this.options.network,
      binds: [],
    };
  }

  private async runWithPortRetry(
    rt: ContainerRuntime,
    name: string,
    shape: ContainerShape,
  ): Promise<ContainerInfo> {
    const { envs } = shape;
    // Only the token's digest goes into the container: code in it can read its environment.
    const token = await this.tokens.forNew(name);
    const labels = { ...shape.labels, ...token.labels };
    const tried: number[] = [];
    try {
      for (let attempt = 0; attempt < PORT_ATTEMPTS; attempt++) {
        const hostPort = shape.network ? await this.freePort(rt, tried) : null;
        const socketDir = shape.network ? null : await this.socketDirFor(name);
        const spec: ContainerSpec = {
          name,
          image: shape.image,
          env: {
            SANDBOXD_TOKEN_SHA256: token.digest,
            // HOME on the volume: pip and npm caches survive pause/resume and a read-only root.
            SANDBOXD_ENV: JSON.stringify({ HOME: `${VIRTUAL_ROOT}/.sandpit/home`, ...envs }),
            SANDBOXD_AIO_PATHS: "any", // a container: AIO paths reach what bash can
          },
          labels: hostPort === null ? labels : { ...labels, [LABEL.port]: String(hostPort) },
          volume: `${name}-data`,
          hostPort,
          bindHost: this.options.bindHost,
          socketDir,
          cpus: shape.cpus,
          memoryBytes: shape.memoryBytes,
          pids: this.options.pids,
          readOnlyRoot: this.options.readOnlyRoot,
          binds: shape.binds,
        };
        try {
          return await rt.run(spec);
        } catch (err) {
          if (!(err instanceof PortConflictError) || hostPort === null) throw err;
          tried.push(hostPort);
          this.logger?.info(
            { container: name, port: hostPort, attempt: attempt + 1 },
            "host port taken; trying another",
          );
        }
      }
      throw new SandboxError(
        `no free host port for ${name} after ${PORT_ATTEMPTS} attempts (tried ${tried.join(", ")}); widen portRange or free some ports`,
        "CAPACITY_EXCEEDED",
      );
    } catch (err) {
      // The volume was made for a container that never came to be; a name conflict means the
      // container (and volume) belong to the process that won, so those stay.
      if (!(err instanceof NameConflictError))
        await rt.remove(name, `${name}-data`).catch(() => undefined);
      throw err;
    }
  }

  /** A directory the container's user (uid 1000) can create its socket in. */
  private async socketDirFor(name: string): Promise<string> {
    const dir = join(this.options.socketDir, name);
    await mkdir(dir, { recursive: true });
    await chmod(dir, 0o777); // the token, not the directory, is what guards sandboxd
    return dir;
  }

  async removeSocketDir(name: string): Promise<void> {
    await rm(join(this.options.socketDir, name), { recursive: true, force: true });
  }

  /**
   * The next port in the range that no Sandpit container holds (running or stopped: a stopped
   * one takes its port back on start), that this process has not just handed out, and that this
   * attempt has not tried. Chosen and reserved with no await in between, so concurrent creates
   * in one process never pick the same port.
   */
  private async freePort(rt: ContainerRuntime, tried: number[]): Promise<number> {
    const held = (await rt.summaries(`${this.options.containerPrefix}-`))
      .map((c) => Number(c.labels[LABEL.port]))
      .filter((p) => p > 0);
    const used = new Set<number>([...held, ...tried, ...this.recentPorts]);
    const { basePort, portRange } = this.options;
    for (let i = 0; i < portRange; i++) {
      const port = basePort + i;
      if (!used.has(port)) {
        this.recentPorts.add(port);
        setTimeout(() => this.recentPorts.delete(port), 60_000).unref();
        return port;
      }
    }
    throw new SandboxError(
      `all ${portRange} host ports from ${basePort} are in use by sandboxes`,
      "CAPACITY_EXCEEDED",
    );
  }

  /**
   * Takes a blank warm container for a new thread, if one is ready; null otherwise. Ours come
   * from memory; others' (started by another process) from one listing. Claiming is a rename,
   * one inspect, and sandboxd's /v1/init with the thread's environment (the token stays).
   */
  private async claimWarm(
    rt: ContainerRuntime,
    name: string,
    labels: Record<string, string>,
    o: SandboxCreateOptions,
  ): Promise<DockerSandbox | null> {
    if (this.options.warm === 0) return null;
    const candidates: WarmContainer[] = this.warmReady.splice(0);
    if (candidates.length === 0) {
      const prefix = `${this.options.containerPrefix}-warm-`;
      for (const c of await rt.summaries(prefix))
        if (c.running) candidates.push({ name: c.name, info: null, client: null });
    }
    if (candidates.length === 0) return null;
    // The name is this thread's alone, so its labels may be written before any rename wins.
    await this.claimed.set(name, labels);
    for (const [i, candidate] of candidates.entries()) {
      try {
        await rt.rename(candidate.name, name);
      } catch {
        await candidate.client?.close().catch(() => undefined);
        continue; // claimed by another process meanwhile
      }
      this.warmReady.push(...candidates.slice(i + 1)); // the rest stay warm
      // Again once the name is held: a same-thread create elsewhere that claimed nothing may
      // have removed the file before this rename.
      await this.claimed.set(name, labels);
      // One this process started is known (a rename changes nothing else); another's is inspected.
      const info = candidate.info ? { ...candidate.info, name } : await rt.inspect(name);
      if (!info) continue;
      const sandbox = this.adopt(info);
      // Its sandboxd gets the token of the thread's name (the warm one stops working there).
      await sandbox.connectReady(info, {
        env: o.envs ?? {},
        client: candidate.client ?? undefined,
      });
      return sandbox;
    }
    // None was claimed: a container of its own will carry the labels. Unless another process
    // holds the name by now (a create of the same thread): then the file is its claim's too.
    if (!(await rt.inspect(name))) await this.claimed.remove(name);
    return null;
  }

  /** Tops the warm pool up to `warm` blank containers, each answering and warmed up. */
  fillWarmPool(): Promise<void> {
    if (this.options.warm === 0) return Promise.resolve();
    this.warmFill ??= (async () => {
      const rt = await this.runtime();
      if (rt.kind !== "docker") return; // claiming a warm container needs rename
      const prefix = `${this.options.containerPrefix}-warm-`;
      const have = (await rt.summaries(prefix)).filter((c) => c.running).length;
      for (let i = have; i < this.options.warm; i++) {
        const name = `${prefix}${randomBytes(6).toString("hex")}`;
        const labels = { [LABEL.managed]: "true", [LABEL.warm]: "true" };
        const info = await this.runWithPortRetry(rt, name, { ...this.defaultShape(), labels });
        const client = await this.waitReady(info);
        // A few commands first: a fresh sandboxd's first commands pay for JIT warm-up and
        // connection set-up; the claimer should not. The client (and its connection) is the
        // claimer's.
        for (let n = 0; n < 5; n++) await client.runCommand({ command: "true" });
        // And the claim's init: one that sets the token the client has changes nothing.
        await client.init({ token: client.connection.token });
        this.warmReady.push({ name, info, client });
        this.logger?.debug({ container: name }, "warm container ready");
      }
    })()
      .catch((err: unknown) => this.logger?.warn({ err }, "could not fill the warm pool"))
      .finally(() => (this.warmFill = null));
    return this.warmFill;
  }

  /**
   * Starts the reaper: at the idle timeout's pace, or every second once some sandbox has a
   * lifetime or idle timeout of its own (`lifetimes`).
   */
  startReaper(lifetimes = false): void {
    const every = lifetimes
      ? LIFETIME_REAP_MS
      : this.options.idleTimeoutMs === 0
        ? LIFETIME_SCAN_MS
        : Math.max(1_000, Math.min(60_000, Math.floor(this.options.idleTimeoutMs / 2)));
    if (this.reaper && this.reapEveryMs <= every) return;
    if (this.reaper) clearInterval(this.reaper);
    this.reapEveryMs = every;
    this.reaper = setInterval(() => this.reapInBackground(), every);
    this.reaper.unref();
  }

  private reapInBackground(): void {
    void this.reapIdle().catch((err: unknown) => this.logger?.warn({ err }, "idle reaper failed"));
  }

  /**
   * Removes sandboxes past their lifetime (stopped ones too) and stops running ones whose
   * sandboxd has been idle past their idle timeout (their own, else idleTimeoutMs); returns the
   * names it acted on. A pass asked for while one runs is that pass.
   */
  reapIdle(): Promise<string[]> {
    this.reaping ??= this.reapPass().finally(() => (this.reaping = null));
    return this.reaping;
  }

  private async reapPass(): Promise<string[]> {
    const rt = await this.runtime();
    const stopped: string[] = [];
    let lifetimes = false;
    for (const c of await rt.list(`${this.options.containerPrefix}-`)) {
      if (c.name.startsWith(`${this.options.containerPrefix}-warm-`)) continue;
      const labels = await this.claimed.of(c);
      if (
        (await this.lifetimes.expiresAt(c.name, labels)) !== undefined ||
        labels[LIFETIME_LABEL.idleTimeoutMs]
      )
        lifetimes = true;
      if (await this.isExpired(c)) {
        this.logger?.info({ container: c.name }, "removing a sandbox at the end of its lifetime");
        await this.removeContainer(c);
        stopped.push(c.name);
        continue;
      }
      const idleTimeoutMs =
        Number((await this.claimed.of(c))[LIFETIME_LABEL.idleTimeoutMs]) ||
        this.options.idleTimeoutMs;
      if (!c.running || !c.endpoint || idleTimeoutMs === 0) continue;
      if (await this.drainIfIdle(c, idleTimeoutMs)) {
        this.logger?.info({ container: c.name }, "stopped idle sandbox");
        const mine = await this.sandboxes.get(c.name)?.catch(() => undefined);
        await mine?.dropClient();
        stopped.push(c.name);
      }
    }
    // Some sandbox ends at a time of its own (set here or by any other process): look every second.
    if (lifetimes) this.startReaper(true);
    return stopped;
  }

  /** See Drainer.drainIfIdle (./drain.ts). */
  drainIfIdle(c: ContainerInfo, minIdleMs: number): Promise<boolean> {
    return this.drainer.drainIfIdle(c, minIdleMs);
  }

  /** See Drainer.whenStopped (./drain.ts). */
  whenStopped(name: string, draining: boolean): Promise<ContainerInfo | null> {
    return this.drainer.whenStopped(name, draining);
  }

  /** Stops a container if nothing runs in it now (see drainIfIdle). */
  async drainNamed(name: string): Promise<void> {
    const info = await (await this.runtime()).inspect(name);
    if (info?.running) await this.drainIfIdle(info, 0);
  }

  /**
   * Removes a container this create just made, if nothing runs in it: a create of the same
   * thread in another process may have adopted it meanwhile, and then it stays.
   */
  private async undoCreate(rt: ContainerRuntime, name: string): Promise<void> {
    const info = await rt.inspect(name);
    if (!info || (info.running && !(await this.drainIfIdle(info, 0)))) return;
    await rt.remove(name, info.volume);
    await this.removeHostState(name);
  }

  private instance(sandbox: DockerSandbox): SandboxInstance {
    return new SandboxdInstance(sandbox.name, sandbox, {
      workingDirectory: sandbox.record.workingDirectory,
      timeoutMs: sandbox.record.timeoutMs,
    });
  }
}

/**
 * Gives a sandboxd that started with its creation token the current one (/v1/init, which also
 * makes the old one stop working), with a claim's environment on a claim. Outside a claim, a
 * refusal means it has the current one already (handed over since it started).
 */
async function handOver(endpoint: string, tokens: SandboxTokens, claim?: Claim): Promise<void> {
  const client = clientAt(endpoint, tokens.boot);
  try {
    await client.init({ token: tokens.live, ...(claim ? { env: claim.env } : {}) });
  } catch (err) {
    if (claim || !(err instanceof SandboxError && err.code === "UNAUTHORIZED")) throw err;
  } finally {
    await client.close();
  }
}

/**
 * The defaults create() stored in the sandbox ({} when it stored none: sandboxd's own
 * NOT_FOUND). Rejects when sandboxd did not answer, or refused the token.
 */
async function readRecord(client: SandboxdClient): Promise<SandboxRecord> {
  let bytes: Uint8Array;
  try {
    bytes = await client.readFile(RECORD_PATH);
  } catch (err) {
    // An error envelope (its cause) is sandboxd's answer: the file is not there.
    if (err instanceof SandboxError && err.code === "NOT_FOUND" && err.cause) return {};
    throw err;
  }
  try {
    const parsed = JSON.parse(new TextDecoder().decode(bytes)) as SandboxRecord;
    return {
      workingDirectory:
        typeof parsed.workingDirectory === "string" ? parsed.workingDirectory : undefined,
      timeoutMs: typeof parsed.timeoutMs === "number" ? parsed.timeoutMs : undefined,
    };
  } catch {
    return {}; // not ours (code in the sandbox may write there)
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The contract's state of a container: stopped (by pause or the reaper) is paused. */
function containerState(c: ContainerInfo): SandboxState {
  if (c.running) return "running";
  if (c.state === "created" || c.state === "restarting") return "starting";
  if (c.state === "removing") return "stopping";
  return "paused";
}
