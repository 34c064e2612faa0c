/**
 * E2B's control plane (its REST API as the official SDKs call it, docs/e2b.md) over Sandbox
 * resources: create (template → pool, timeout → lifetime, metadata, envVars, autoPause), list
 * (v1, and v2 with its filters and pagination), get, kill, pause, connect and resume, set
 * timeout, refresh, metrics. The key is a Sandpit API key in `X-API-Key`: its tenant sees its own
 * sandboxes only, and its quota and longest timeout apply. Mounted by ./index.ts under /e2b and
 * on the `api.<domain>` host.
 */
import { Router, type Request, type Response } from "express";
import type { SandboxPool } from "@sandpit/operator/api";
import { type KeyRing, requireKey } from "../auth.ts";
import { MAX_LIFETIME_S, lifetimePatch, livedSeconds } from "../../lifetime.ts";
import { ApiError, parse } from "../errors.ts";
import { jsonBody } from "../json-body.ts";
import type { ApiKey, ProvisionerConfig } from "../../config.ts";
import { type Sandbox, SandboxUnavailable } from "../../sandboxes.ts";
import type { SandboxBackend } from "../../store.ts";
import { type Transport, abortedBy } from "../../transport.ts";
import { ENVD_VERSION } from "./envd/index.ts";
import { sandboxNotFound } from "./errors.ts";
import type { EnvdTokens } from "./tokens.ts";
import {
  E2B_ANNOTATION,
  MIN_LIFETIME_S,
  autoPauses,
  autoResumes,
  endAt,
  metadataOf,
  resourcesOf,
  startedAt,
  stateOf,
  templateOf,
} from "./records.ts";
import {
  ConnectSandbox,
  ListQuery,
  MAX_PAGE,
  NewSandbox,
  Pause,
  Refresh,
  ResumeSandbox,
  STATES,
  SetTimeout,
} from "./schemas.ts";

/** The templates every E2B program names without asking: both are the default pool. */
export const DEFAULT_TEMPLATES = ["base", "code-interpreter-v1"] as const;
/** E2B's defaults: 300 s on the v2 routes the SDKs use, 15 s on the deprecated v1 ones. */
const DEFAULT_TIMEOUT_S = { v1: 15, v2: 300 };
const DEFAULT_REFRESH_S = 15;
/** The deprecated clientID field: one value, since there are no E2B clients behind it. */
const CLIENT_ID = "sandpit";
const POOL_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** Pools change rarely; a create or a list should not read each one from the API server. */
const POOL_CACHE_MS = 10_000;

/** What the E2B API works with (./index.ts builds it). */
export interface E2bDeps {
  cfg: ProvisionerConfig;
  store: SandboxBackend;
  keys: KeyRing;
  transport: Transport;
  tokens: EnvdTokens;
}

export function controlRouter(d: E2bDeps): Router {
  const r = Router();
  const body = jsonBody(d.cfg.maxBodyBytes);
  const pools = new PoolCache(d);
  r.use(requireKey(d.keys, "x-api-key"));

  /** The caller's sandbox: this replica's view, else the API server's (another replica's create). */
  const owned = async (req: Request): Promise<Sandbox> => {
    const id = String(req.params.id);
    const tenant = req.apiKey!.tenant;
    const s = d.store.get(tenant, id) ?? (await d.store.getLive(tenant, id));
    if (!s || s.metadata.deletionTimestamp) throw sandboxNotFound(id);
    return s;
  };
  /** The caller's sandbox as the API server has it now (answers must not trail a write). */
  const ownedLive = async (req: Request): Promise<Sandbox> => {
    const id = String(req.params.id);
    const s = await d.store.getLive(req.apiKey!.tenant, id);
    if (!s || s.metadata.deletionTimestamp) throw sandboxNotFound(id);
    return s;
  };

  /** E2B's Sandbox object: what create, connect and resume answer. */
  const summary = (s: Sandbox) => ({
    sandboxID: s.metadata.name,
    templateID: templateOf(s),
    alias: templateOf(s),
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: d.tokens.forUid(s.metadata.uid!),
    trafficAccessToken: d.tokens.forUid(s.metadata.uid!, "traffic"),
    domain: d.cfg.e2b?.domain ?? null,
  });
  /** E2B's ListedSandbox; SandboxDetail adds the token, domain and lifecycle. */
  const listed = async (s: Sandbox) => ({
    sandboxID: s.metadata.name,
    templateID: templateOf(s),
    alias: templateOf(s),
    clientID: CLIENT_ID,
    startedAt: startedAt(s).toISOString(),
    endAt: endAt(s).toISOString(),
    state: stateOf(s),
    ...resourcesOf(s, s.spec.poolRef ? await pools.get(s.spec.poolRef) : undefined),
    envdVersion: ENVD_VERSION,
    metadata: metadataOf(s),
    volumeMounts: [],
  });
  const detail = async (s: Sandbox) => ({
    ...(await listed(s)),
    envdAccessToken: d.tokens.forUid(s.metadata.uid!),
    domain: d.cfg.e2b?.domain ?? null,
    lifecycle: { onTimeout: autoPauses(s) ? "pause" : "kill", autoResume: autoResumes(s) },
  });

  /** The pool a templateID names: a SandboxPool of that name, else the defaults' pool, else 404. */
  const poolFor = async (templateID: string): Promise<string | undefined> => {
    if (POOL_NAME.test(templateID) && (await pools.get(templateID))) return templateID;
    if ((DEFAULT_TEMPLATES as readonly string[]).includes(templateID)) return d.cfg.defaultPool;
    throw new ApiError("NOT_FOUND", `template '${templateID}' not found`);
  };

  const create = async (req: Request, res: Response, version: "v1" | "v2") => {
    const b = parse(NewSandbox, req.body ?? {}, "body");
    const key = req.apiKey!;
    const timeoutS = checkTimeout(key, b.timeout ?? DEFAULT_TIMEOUT_S[version]);
    const pool = await poolFor(b.templateID);
    const lifetime = Math.max(MIN_LIFETIME_S, timeoutS);
    const { sandbox } = await d.store.create({
      tenant: key.tenant,
      quota: key.maxSandboxes,
      maxResources: key.maxResources,
      pool,
      annotations: {
        [E2B_ANNOTATION.template]: b.templateID,
        ...(b.metadata && Object.keys(b.metadata).length
          ? { [E2B_ANNOTATION.metadata]: JSON.stringify(b.metadata) }
          : {}),
        ...(b.autoPause ? { [E2B_ANNOTATION.onTimeout]: "pause" } : {}),
        ...(b.autoResume?.enabled ? { [E2B_ANNOTATION.autoResume]: "true" } : {}),
      },
      spec: {
        ...(b.envVars && Object.keys(b.envVars).length
          ? { env: Object.entries(b.envVars).map(([name, value]) => ({ name, value })) }
          : {}),
        ...(b.allow_internet_access === false ? { network: { egress: "Deny" } } : {}),
        // An auto-pausing sandbox sleeps after `timeout` without traffic and lives as long as
        // its pool or the operator allows; any other ends `timeout` after its creation.
        lifecycle: b.autoPause
          ? { idleTimeoutSeconds: lifetime, suspended: false }
          : { ttlSeconds: lifetime, suspended: false },
      },
    });
    try {
      const ready = await d.transport.ready(sandbox, { signal: abortedBy(req) });
      res.status(201).json(summary(ready));
    } catch (err) {
      // The caller gets an error and no id: a sandbox that is not running for it now is removed
      // rather than left holding a place in the key's quota.
      await d.store.delete(sandbox.metadata.name).catch(() => undefined);
      throw err;
    }
  };
  r.post("/sandboxes", body, (req, res) => create(req, res, "v1"));
  r.post("/v2/sandboxes", body, (req, res) => create(req, res, "v2"));

  r.get("/sandboxes", async (req, res) => {
    const q = parse(ListQuery, req.query, "query");
    const found = filtered(d.store.list(req.apiKey!.tenant), { ...q, state: ["running"] });
    res.json(await Promise.all(found.map(listed)));
  });

  r.get("/v2/sandboxes", async (req, res) => {
    const q = parse(ListQuery, req.query, "query");
    const all = filtered(d.store.list(req.apiKey!.tenant), q);
    const order = q.order ?? "desc";
    all.sort((a, b) => compareCursors(cursorOf(a), cursorOf(b), order));
    const after = q.nextToken ? decodeCursor(q.nextToken) : undefined;
    const rest = after ? all.filter((s) => compareCursors(cursorOf(s), after, order) > 0) : all;
    const page = rest.slice(0, q.limit ?? MAX_PAGE);
    if (rest.length > page.length) res.set("x-next-token", encodeCursor(cursorOf(page.at(-1)!)));
    if (!q.state || q.state.includes("running"))
      res.set("x-total-running", String(all.filter((s) => stateOf(s) === "running").length));
    res.json(await Promise.all(page.map(listed)));
  });

  r.get("/sandboxes/metrics", (_req, res) => {
    // Sandpit keeps no usage history (docs/e2b.md): no sandbox has metrics to report.
    res.json({ sandboxes: {} });
  });

  r.get("/sandboxes/:id", async (req, res) => {
    res.json(await detail(await ownedLive(req)));
  });

  r.delete("/sandboxes/:id", async (req, res) => {
    await d.store.delete((await owned(req)).metadata.name);
    res.status(204).end();
  });

  r.get("/sandboxes/:id/metrics", async (req, res) => {
    await owned(req);
    res.json([]);
  });

  r.post("/sandboxes/:id/pause", body, async (req, res) => {
    parse(Pause, req.body ?? {}, "body");
    const s = await ownedLive(req);
    if (stateOf(s) === "paused")
      throw new ApiError("CONFLICT", `sandbox "${s.metadata.name}" is already paused`);
    await d.store.setSuspended(s.metadata.name, true);
    await suspended(d, req, s.metadata.name);
    res.status(204).end();
  });

  /** Resumes a paused sandbox and waits for it; extends its timeout to at least `timeoutS`. */
  const wake = async (req: Request, s: Sandbox, timeoutS: number): Promise<Sandbox> => {
    await setLifetime(d, req.apiKey!, s, timeoutS, "extend");
    const ready = await d.transport.ready(s, { signal: abortedBy(req) });
    void d.store.reportActivity(s.metadata.name, true);
    return ready;
  };

  // v1 requires the timeout, v2 defaults it to 300 s: both default it here.
  const connect = async (req: Request, res: Response) => {
    const b = parse(ConnectSandbox, req.body ?? {}, "body");
    const s = await ownedLive(req);
    const wasPaused = stateOf(s) === "paused";
    const ready = await wake(req, s, b.timeout ?? DEFAULT_TIMEOUT_S.v2);
    res.status(wasPaused ? 201 : 200).json(summary(ready));
  };
  r.post(["/sandboxes/:id/connect", "/v2/sandboxes/:id/connect"], body, connect);

  r.post("/sandboxes/:id/resume", body, async (req, res) => {
    const b = parse(ResumeSandbox, req.body ?? {}, "body");
    const s = await ownedLive(req);
    if (stateOf(s) !== "paused")
      throw new ApiError("CONFLICT", `sandbox "${s.metadata.name}" is already running`);
    res.status(201).json(summary(await wake(req, s, b.timeout ?? DEFAULT_TIMEOUT_S.v1)));
  });

  r.post("/sandboxes/:id/timeout", body, async (req, res) => {
    const b = parse(SetTimeout, req.body ?? {}, "body");
    await setLifetime(d, req.apiKey!, await ownedLive(req), b.timeout, "set");
    res.status(204).end();
  });

  r.post("/sandboxes/:id/refreshes", body, async (req, res) => {
    const b = parse(Refresh, req.body ?? {}, "body");
    await setLifetime(
      d,
      req.apiKey!,
      await ownedLive(req),
      b.duration ?? DEFAULT_REFRESH_S,
      "extend",
    );
    res.status(204).end();
  });

  r.get(["/sandboxes/:id/logs", "/v2/sandboxes/:id/logs"], async (req, res) => {
    await owned(req);
    // Sandpit keeps no sandbox logs (docs/e2b.md); an empty log, in both versions' shapes.
    res.json({ logs: [], logEntries: [] });
  });

  // E2B features Sandpit does not have, refused by name rather than "no such route".
  const refuse = (what: string) => () => {
    throw new ApiError("INVALID_ARGUMENT", `${what} is not supported by Sandpit (docs/e2b.md)`);
  };
  r.post(["/sandboxes/:id/fork", "/v2/sandboxes/:id/fork"], refuse("forking a sandbox"));
  r.post("/sandboxes/:id/snapshots", refuse("snapshots"));
  r.get("/snapshots", refuse("snapshots"));
  r.put("/sandboxes/:id/network", refuse("changing a sandbox's network"));
  r.all(["/templates", "/templates/*rest", "/v2/templates", "/v3/templates"], refuse("templates"));
  r.all(["/volumes", "/volumes/*rest"], refuse("volumes"));

  r.use((req) => {
    throw new ApiError("NOT_FOUND", `no E2B route ${req.method} ${req.path}`);
  });
  return r;
}

/** The longest timeout of a key that sets none: E2B Pro's, 24 hours. */
const DEFAULT_MAX_TIMEOUT_S = 24 * 3600;

/** The timeout a key may ask for, or a 400 (E2B's answer to a timeout past the team's limit). */
function checkTimeout(key: ApiKey, timeoutS: number): number {
  const max = key.maxTimeoutSeconds ?? DEFAULT_MAX_TIMEOUT_S;
  if (timeoutS > max)
    throw new ApiError(
      "INVALID_ARGUMENT",
      `Timeout cannot be greater than ${max} seconds for this API key`,
    );
  return timeoutS;
}

/**
 * Sets the sandbox's timeout to end `timeoutS` from now ("set", E2B's setTimeout) or to at least
 * that ("extend": connect, resume, refresh). An auto-pausing sandbox's timeout is its idle
 * timeout, restarted now; any other's is its lifetime from creation, so `timeoutS` from now.
 */
async function setLifetime(
  d: E2bDeps,
  key: ApiKey,
  s: Sandbox,
  timeoutS: number,
  how: "set" | "extend",
): Promise<void> {
  checkTimeout(key, timeoutS);
  const lc = s.spec.lifecycle;
  const name = s.metadata.name;
  if (autoPauses(s)) {
    let idle = Math.max(MIN_LIFETIME_S, timeoutS);
    if (lc?.ttlSeconds !== undefined) idle = Math.min(idle, lc.ttlSeconds);
    if (how === "set" || (lc?.idleTimeoutSeconds ?? 0) < idle)
      await d.store.setLifecycle(name, { idleTimeoutSeconds: idle });
    await d.store.reportActivity(name, true);
    return;
  }
  const ttl = Math.max(MIN_LIFETIME_S, livedSeconds(s) + timeoutS);
  if (ttl > MAX_LIFETIME_S)
    throw new ApiError(
      "INVALID_ARGUMENT",
      `a sandbox lives at most ${MAX_LIFETIME_S / 86_400} days from its creation on Sandpit`,
    );
  if (how === "extend" && endAt(s).getTime() >= startedAt(s).getTime() + ttl * 1000) return;
  await d.store.setLifecycle(name, lifetimePatch(s, ttl));
}

/** Waits (as long as a create would) for the operator to have stopped the sandbox's pod. */
async function suspended(d: E2bDeps, req: Request, name: string): Promise<void> {
  const signal = abortedBy(req);
  const deadline = Date.now() + d.cfg.readyTimeoutMs;
  for (;;) {
    const s = await d.store.getLive(req.apiKey!.tenant, name);
    if (!s || s.status?.phase === "Suspended") return;
    if (signal.aborted) return;
    if (Date.now() > deadline)
      throw new SandboxUnavailable("timeout", `sandbox ${name} was not suspended in time`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** v2's filters: state (both when not given), metadata (all pairs must match), start, template. */
function filtered(sandboxes: Sandbox[], q: ListQuery): Sandbox[] {
  const wanted = metadataFilter(q.metadata);
  const states = q.state ?? [...STATES];
  const after = q.startedAfter ? Date.parse(q.startedAfter) : undefined;
  return sandboxes.filter((s) => {
    if (!states.includes(stateOf(s))) return false;
    if (after !== undefined && startedAt(s).getTime() < after) return false;
    if (q.template !== undefined && templateOf(s) !== q.template) return false;
    const m = metadataOf(s);
    return wanted.every(([k, v]) => m[k] === v);
  });
}

/**
 * The JS SDK sends metadata as one query value holding `k=v&k2=v2`, each key and value
 * URI-encoded inside it (so encoded twice on the wire); a client that encodes them once (a `%`
 * that does not start an escape after the first decoding) gets that decoding.
 */
export function metadataFilter(raw: string | undefined): [string, string][] {
  if (!raw) return [];
  const decode = (s: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  };
  return [...new URLSearchParams(raw)].map(([k, v]) => [decode(k), decode(v)]);
}

/** A place in the list's order: start time, then name (unique), so pages never overlap. */
type Cursor = [startedAtMs: number, name: string];

const cursorOf = (s: Sandbox): Cursor => [startedAt(s).getTime(), s.metadata.name];

export function compareCursors(a: Cursor, b: Cursor, order: "asc" | "desc"): number {
  const c = a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
  return order === "asc" ? c : -c;
}

export const encodeCursor = (c: Cursor) => Buffer.from(JSON.stringify(c)).toString("base64url");

export function decodeCursor(token: string): Cursor {
  try {
    const c: unknown = JSON.parse(Buffer.from(token, "base64url").toString());
    if (
      Array.isArray(c) &&
      c.length === 2 &&
      Number.isSafeInteger(c[0]) &&
      typeof c[1] === "string"
    )
      return c as Cursor;
  } catch {
    // answered below
  }
  throw new ApiError("INVALID_ARGUMENT", "query.nextToken: not a token this API gave out");
}

/** SandboxPools by name, read from the API server at most every POOL_CACHE_MS. */
class PoolCache {
  readonly #d: E2bDeps;
  readonly #cache = new Map<string, { at: number; pool: Promise<SandboxPool | undefined> }>();
  constructor(d: E2bDeps) {
    this.#d = d;
  }
  get(name: string): Promise<SandboxPool | undefined> {
    const now = Date.now();
    const hit = this.#cache.get(name);
    if (hit && now - hit.at < POOL_CACHE_MS) return hit.pool;
    for (const [k, v] of this.#cache) if (now - v.at >= POOL_CACHE_MS) this.#cache.delete(k);
    const pool = this.#d.store.getPool(name);
    pool.catch(() => this.#cache.delete(name)); // a failed read is not remembered
    this.#cache.set(name, { at: now, pool });
    return pool;
  }
}
