/**
 * The Kubernetes provider: sandboxes from a Sandpit provisioner (`provisionerUrl`, `apiKey`),
 * which creates Sandbox resources for the operator and proxies sandboxd. The SDK never talks to
 * the Kubernetes API; everything goes through the provisioner's native API:
 *
 *  - create → POST /v1/sandboxes (idempotent per user and thread; answers once Ready);
 *  - the sandbox's sandboxd is the shared client on /v1/sandboxes/:id/proxy, with the API key
 *    as credential (the provisioner swaps in the sandbox's own token);
 *  - pause → POST …/pause (pod stopped, volume kept); resume(id) → POST …/resume;
 *    kill → DELETE; getHost(port) → a local listener tunnelled through the proxy;
 *  - list → GET /v1/sandboxes?label=k=v, get → GET /v1/sandboxes/:id (a suspended sandbox stays
 *    suspended), setTimeout → POST …/timeout, getUrl(port) → the provisioner's …/ports/:port/
 *    route with the API key as the header it needs.
 */
import type { z } from "zod";
import { VIRTUAL_ROOT } from "@sandpit/sandboxd/wire";
import { validateCreate, validateListLabels } from "../../create-options.ts";
import { refuseUnsupported, userLabels } from "../../platform-options.ts";
import { SandboxError, type SandboxErrorCode } from "../../errors.ts";
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
  SandboxState,
  SandboxUrl,
} from "../../types.ts";
import { provisionerError } from "./errors.ts";
import { KubernetesProviderOptions, type KubernetesProviderInput } from "./options.ts";

/** Re-exported so the provider's entry point carries its options schema. */
export { KubernetesProviderOptions, type KubernetesProviderInput };

type Options = z.output<typeof KubernetesProviderOptions>;

/** The defaults create() was given, kept in the sandbox so resume(id) finds them again. */
const RECORD_PATH = `${VIRTUAL_ROOT}/.sandpit/sandbox.json`;

interface SandboxView {
  id: string;
  phase: string;
  labels?: Record<string, string>;
  threadId?: string;
  userId?: string;
  pool?: string;
  language?: string;
  createdAt?: string;
  expiresAt?: string;
  resources?: { cpu?: string; memory?: string; ephemeralStorage?: string };
}

const PHASES: Record<string, SandboxState> = {
  Pending: "starting",
  Starting: "starting",
  Ready: "running",
  Suspended: "paused",
  Terminating: "stopping",
  Failed: "failed",
};

const SANDBOX_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const seconds = (ms: number) => Math.ceil(ms / 1000);

export class KubernetesProvider implements SandboxProvider {
  private readonly options: Options;
  /** Sandboxes handed out by this process, whose port forwards release() and close() end. */
  private readonly open = new Map<string, ProvisionedSandbox>();

  constructor(input: KubernetesProviderInput) {
    this.options = parseOptions(KubernetesProviderOptions, input, "sandbox.kubernetes");
  }

  /** @internal the base URL, without a trailing slash. */
  get baseUrl(): string {
    return this.options.provisionerUrl.replace(/\/+$/, "");
  }

  /** @internal */
  get apiKey(): string {
    return this.options.apiKey;
  }

  private handle(id: string): ProvisionedSandbox {
    let s = this.open.get(id);
    if (!s) this.open.set(id, (s = new ProvisionedSandbox(id, this)));
    return s;
  }

  async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wanted = validateListLabels(options?.labels);
    const q = new URLSearchParams(
      Object.entries(wanted).map(([k, v]): [string, string] => ["label", `${k}=${v}`]),
    );
    const { sandboxes } = await this.call<{ sandboxes: SandboxView[] }>(
      "GET",
      `/v1/sandboxes${q.size ? `?${q}` : ""}`,
      "listing sandboxes",
    );
    return sandboxes.map(toInfo);
  }

  async get(sandboxId: string): Promise<SandboxInfo> {
    if (typeof sandboxId !== "string" || !SANDBOX_NAME.test(sandboxId))
      throw new SandboxError(`no sandbox ${JSON.stringify(sandboxId)}`, "NOT_FOUND");
    return toInfo(
      await this.call<SandboxView>(
        "GET",
        `/v1/sandboxes/${sandboxId}`,
        `finding sandbox ${sandboxId}`,
      ),
    );
  }

  async release(sandboxId: string): Promise<void> {
    const s = this.open.get(sandboxId);
    this.open.delete(sandboxId);
    await s?.release();
  }

  async close(): Promise<void> {
    const all = [...this.open.values()];
    this.open.clear();
    await Promise.all(all.map((s) => s.release()));
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    const o = validateCreate(options);
    const policy = "the platform's network policy applies; a sandbox can only ask for deny";
    refuseUnsupported(
      "kubernetes",
      o,
      {
        ttl: true,
        idleTimeout: true,
        cpu: true,
        memory: true,
        disk: true,
        template: true,
        labels: true,
        networkDeny: true,
      },
      {
        networkInternet: policy,
        networkAllow: policy,
        mounts: "claims are shared by every tenant of the namespace; mounts come from the pool",
      },
    );
    const r = o.resources;
    const view = await this.call<SandboxView>("POST", "/v1/sandboxes", "creating a sandbox", {
      language: o.language,
      ...(o.packages?.length ? { packages: o.packages } : {}),
      ...(o.envs && Object.keys(o.envs).length ? { env: o.envs } : {}),
      ...(o.threadId ? { threadId: o.threadId } : {}),
      ...(o.userId ? { userId: o.userId } : {}),
      ...((o.template ?? this.options.pool) ? { pool: o.template ?? this.options.pool } : {}),
      ...(o.labels && Object.keys(o.labels).length ? { labels: o.labels } : {}),
      ...(o.lifetime?.ttlMs ? { ttlSeconds: seconds(o.lifetime.ttlMs) } : {}),
      ...(o.lifetime?.idleTimeoutMs
        ? { idleTimeoutSeconds: seconds(o.lifetime.idleTimeoutMs) }
        : {}),
      ...(r
        ? {
            resources: {
              ...(r.cpu ? { cpu: `${Math.ceil(r.cpu * 1000)}m` } : {}),
              ...(r.memoryMiB ? { memory: `${r.memoryMiB}Mi` } : {}),
              ...(r.diskMiB ? { ephemeralStorage: `${r.diskMiB}Mi` } : {}),
            },
          }
        : {}),
      ...(o.network === "deny" ? { network: "deny" } : {}),
    });
    const sandbox = this.handle(view.id);
    const record = { workingDirectory: o.workingDirectory, timeoutMs: o.timeoutMs };
    if (o.workingDirectory || o.timeoutMs) {
      const client = await sandbox.connect();
      await client.writeFile(RECORD_PATH, JSON.stringify(record));
      if (o.workingDirectory) await client.mkdir(o.workingDirectory);
    }
    return new SandboxdInstance(view.id, sandbox, record);
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    if (typeof sandboxId !== "string" || !SANDBOX_NAME.test(sandboxId)) {
      throw new SandboxError(`no sandbox "${sandboxId}"`, "NOT_FOUND");
    }
    const view = await this.call<SandboxView>(
      "GET",
      `/v1/sandboxes/${sandboxId}`,
      `finding sandbox ${sandboxId}`,
    );
    if (view.phase !== "Ready")
      await this.call("POST", `/v1/sandboxes/${sandboxId}/resume`, `resuming sandbox ${sandboxId}`);
    const sandbox = this.handle(sandboxId);
    let record: { workingDirectory?: string; timeoutMs?: number } = {};
    try {
      const bytes = await (await sandbox.connect()).readFile(RECORD_PATH);
      const parsed = JSON.parse(new TextDecoder().decode(bytes)) as typeof record;
      record = {
        ...(typeof parsed.workingDirectory === "string"
          ? { workingDirectory: parsed.workingDirectory }
          : {}),
        ...(typeof parsed.timeoutMs === "number" ? { timeoutMs: parsed.timeoutMs } : {}),
      };
    } catch {
      // created without defaults
    }
    return new SandboxdInstance(sandboxId, sandbox, record);
  }

  /**
   * @internal one call to the provisioner's native API. A connection that was never made (the
   * provisioner rolling, its Service catching up) is retried twice: the request was not sent, so
   * any call, a create included, is safe to repeat.
   */
  async call<T>(method: string, path: string, what: string, body?: unknown): Promise<T> {
    const long = method === "POST" && (path === "/v1/sandboxes" || path.endsWith("/resume"));
    let res: Response | undefined;
    for (let attempt = 1; !res; attempt++) {
      try {
        res = await fetch(`${this.options.provisionerUrl.replace(/\/+$/, "")}${path}`, {
          method,
          headers: {
            authorization: `Bearer ${this.options.apiKey}`,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: AbortSignal.timeout(
            long ? this.options.readyTimeoutMs + 10_000 : this.options.requestTimeoutMs,
          ),
        });
      } catch (err) {
        if (attempt < CONNECT_ATTEMPTS && neverConnected(err)) {
          await new Promise((r) => setTimeout(r, 250 * 4 ** (attempt - 1)));
          continue;
        }
        const e = err as Error;
        const code: SandboxErrorCode = e.name === "TimeoutError" ? "TIMEOUT" : "CONNECTION_FAILED";
        throw new SandboxError(
          `${what}: the provisioner at ${this.options.provisionerUrl} did not answer (${e.message})`,
          code,
          err,
        );
      }
    }
    const text = await res.text();
    if (!res.ok) throw provisionerError(res.status, text, what);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** @internal */
  get readyTimeoutMs(): number {
    return this.options.readyTimeoutMs;
  }

  /** @internal */
  client(sandboxId: string): SandboxdClient {
    return new SandboxdClient({
      baseUrl: `${this.options.provisionerUrl.replace(/\/+$/, "")}/v1/sandboxes/${sandboxId}/proxy`,
      token: this.options.apiKey,
      requestTimeoutMs: this.options.requestTimeoutMs,
    });
  }
}

/** The lifecycle of one provisioned sandbox, as the shared instance needs it. */
class ProvisionedSandbox implements SandboxdLifecycle {
  private readonly id: string;
  private readonly provider: KubernetesProvider;
  private sandboxd: SandboxdClient | undefined;
  private readonly forwarder: PortForwarder;

  constructor(id: string, provider: KubernetesProvider) {
    this.id = id;
    this.provider = provider;
    this.forwarder = new PortForwarder(() => this.connect());
  }

  /** The proxy resumes a paused sandbox on the first call, so connecting needs no check. */
  async connect(): Promise<SandboxdClient> {
    this.sandboxd ??= this.provider.client(this.id);
    return this.sandboxd;
  }

  /**
   * Resolves once the operator has stopped the pod (phase Suspended), not when the provisioner
   * accepted the request: a resume right after an accepted pause would otherwise undo it before
   * the operator acted, and the pod (with its background processes) would keep running.
   */
  async pause(): Promise<void> {
    await this.forwarder.close();
    await this.provider.call(
      "POST",
      `/v1/sandboxes/${this.id}/pause`,
      `pausing sandbox ${this.id}`,
    );
    const what = `waiting for sandbox ${this.id} to be suspended`;
    const deadline = Date.now() + this.provider.readyTimeoutMs;
    while (
      (await this.provider.call<SandboxView>("GET", `/v1/sandboxes/${this.id}`, what)).phase !==
      "Suspended"
    ) {
      if (Date.now() > deadline) throw new SandboxError(`${what}: still running`, "TIMEOUT");
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async kill(): Promise<void> {
    await this.forwarder.close();
    try {
      await this.provider.call("DELETE", `/v1/sandboxes/${this.id}`, `deleting sandbox ${this.id}`);
    } catch (err) {
      if (!(err instanceof SandboxError && err.code === "NOT_FOUND")) throw err;
    }
    await this.sandboxd?.close();
  }

  getHost(port: number): Promise<string> {
    return this.forwarder.forward(port);
  }

  /** The provisioner's route to a port inside, which takes the same API key. */
  async getUrl(port: number): Promise<SandboxUrl> {
    return {
      url: `${this.provider.baseUrl}/v1/sandboxes/${this.id}/ports/${port}/`,
      headers: { authorization: `Bearer ${this.provider.apiKey}` },
    };
  }

  /**
   * Resolves once the sandbox's info shows the new end (the operator writes it into the status a
   * moment after the provisioner changed the spec), so a getInfo() that follows sees it.
   */
  async setTimeout(timeoutMs: number): Promise<void> {
    const what = `setting the timeout of sandbox ${this.id}`;
    const set = await this.provider.call<SandboxView>(
      "POST",
      `/v1/sandboxes/${this.id}/timeout`,
      what,
      { timeoutSeconds: seconds(timeoutMs) },
    );
    const target = Date.parse(set.expiresAt ?? "");
    for (let i = 0; i < SETTLE_POLLS && Number.isFinite(target); i++) {
      const now = await this.provider.get(this.id);
      if (Math.abs((now.expiresAt?.getTime() ?? 0) - target) < 2_000) return;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  info(): Promise<SandboxInfo> {
    return this.provider.get(this.id);
  }

  async release(): Promise<void> {
    await this.forwarder.close();
    const c = this.sandboxd;
    this.sandboxd = undefined;
    await c?.close();
  }

  async diagnose(err: SandboxError): Promise<SandboxError> {
    try {
      await this.provider.call("GET", `/v1/sandboxes/${this.id}`, `finding sandbox ${this.id}`);
    } catch (e) {
      if (e instanceof SandboxError && e.code === "NOT_FOUND") return e;
    }
    return err;
  }
}

const CONNECT_ATTEMPTS = 3;
/** How many times (200 ms apart) setTimeout looks for the new end in the sandbox's status. */
const SETTLE_POLLS = 75;

function toInfo(v: SandboxView): SandboxInfo {
  const r = v.resources;
  return {
    sandboxId: v.id,
    provider: "kubernetes",
    state: PHASES[v.phase] ?? "starting",
    labels: userLabels(v.labels),
    ...(v.language === "python" || v.language === "typescript" ? { language: v.language } : {}),
    ...(v.threadId ? { threadId: v.threadId } : {}),
    ...(v.userId ? { userId: v.userId } : {}),
    ...(v.pool ? { template: v.pool } : {}),
    ...(v.createdAt ? { createdAt: new Date(v.createdAt) } : {}),
    ...(v.expiresAt ? { expiresAt: new Date(v.expiresAt) } : {}),
    ...(r
      ? {
          resources: {
            ...(r.cpu ? { cpu: quantity(r.cpu) } : {}),
            ...(r.memory ? { memoryMiB: quantity(r.memory) / 1048576 } : {}),
            ...(r.ephemeralStorage ? { diskMiB: quantity(r.ephemeralStorage) / 1048576 } : {}),
          },
        }
      : {}),
  };
}

const SUFFIX: Record<string, number> = {
  m: 1e-3,
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4,
};

/** A Kubernetes quantity ("500m", "512Mi", "2") as a number. */
function quantity(q: string): number {
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(q);
  return m ? Number(m[1]) * (SUFFIX[m[2]!] ?? 1) : NaN;
}

/** Whether fetch failed before a connection existed, so the request never left. */
function neverConnected(err: unknown): boolean {
  const code = ((err as { cause?: { code?: string } }).cause ?? {}).code;
  return (
    code === "ECONNREFUSED" ||
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "EHOSTUNREACH" ||
    code === "ENETUNREACH"
  );
}
