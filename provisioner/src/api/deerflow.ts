/**
 * DeerFlow's provisioner API (`provisioner_url`), so DeerFlow works against Sandpit unchanged:
 * `/api/sandboxes` with `X-API-Key`, and `/health`. The `sandbox_url` returned serves the AIO
 * subset of sandboxd through the proxy. DeerFlow sends no credential to the sandbox itself, so
 * the URL carries an unguessable capability (192 random bits) in its path instead.
 */
import { Router, type Request, type Response } from "express";
import type { Mount } from "@sandpit/operator/api";
import { ID_PATTERN, isAioPath } from "@sandpit/sandboxd/protocol";
import { type KeyRing, requireKey } from "./auth.ts";
import { ApiError, parse } from "./errors.ts";
import { jsonBody } from "./json-body.ts";
import { DeerFlowCreate } from "./schemas.ts";
import { capabilityMatches, capabilityOf } from "../capability.ts";
import type { ProvisionerConfig } from "../config.ts";
import {
  EXTERNAL_ID_ANNOTATION,
  type Sandbox,
  externalSandboxName,
  identity,
} from "../sandboxes.ts";
import type { SandboxBackend } from "../store.ts";
import type { Transport } from "../transport.ts";

export interface DeerFlowDeps {
  cfg: ProvisionerConfig;
  store: SandboxBackend;
  keys: KeyRing;
  transport: Transport;
  baseUrl: (req: Request) => string;
  /** Key of the sandbox_url capabilities (../capability.ts). */
  capabilityKey: Buffer;
}

/** How long a create waits for Ready before answering; DeerFlow's client waits 30 s. */
const CREATE_WAIT_MS = 25_000;

/**
 * DeerFlow's `status`, which its `is_alive` compares with "Running" and deletes the sandbox (and
 * the thread's workspace) on anything else. So "Running" whenever the sandbox_url serves: Ready,
 * and also on its way there or asleep (Pending, Starting, Suspended), since the first request
 * through the sandbox_url waits for it or resumes it. Not while the pool is at capacity (that
 * request would be refused) nor once it failed.
 */
export function deerflowStatus(s: Sandbox): string {
  const phase = s.status?.phase ?? "Pending";
  if (phase === "Failed") return "Failed";
  const atCapacity = s.status?.conditions?.some(
    (c) => c.type === "CapacityExceeded" && c.status === "True",
  );
  return atCapacity && phase === "Pending" ? "Pending" : "Running";
}

/**
 * Where each of DeerFlow's extra_mounts goes. Host paths are never used: the sandbox runs
 * elsewhere. A container path the provisioner's settings map to a claim (SANDPIT_DEERFLOW_MOUNTS)
 * mounts that claim, read-only if either the setting or DeerFlow says so; any other becomes an
 * empty, writable directory.
 */
export function placeMounts(
  asked: readonly { container_path: string; read_only?: boolean }[],
  volumes: readonly Mount[],
): { emptyDirs: string[]; mounts: Mount[] } {
  const emptyDirs: string[] = [];
  const mounts: Mount[] = [];
  for (const m of asked) {
    const volume = volumes.find((v) => v.mountPath === m.container_path);
    if (!volume) emptyDirs.push(m.container_path);
    else if (volume.readOnly || m.read_only) mounts.push({ ...volume, readOnly: true });
    else mounts.push(volume);
  }
  return { emptyDirs, mounts };
}

/**
 * What each asked-for path became, read back from the Sandbox. `read_only` is what the sandbox
 * has, not what was asked: an empty directory is always writable (a read-only empty directory
 * would hold nothing), so DeerFlow's `read_only: true` for a path no claim backs answers false.
 */
function providedMounts(s: Sandbox) {
  return [
    ...(s.spec.mounts ?? []).map((m) => ({
      container_path: m.mountPath,
      provided_as: "volume" as const,
      claim_name: m.claimName,
      read_only: m.readOnly ?? false,
    })),
    ...(s.spec.emptyDirs ?? []).map((p) => ({
      container_path: p,
      provided_as: "empty_dir" as const,
      read_only: false,
    })),
  ];
}

export function deerflowRouter(d: DeerFlowDeps): Router {
  const r = Router();
  r.get("/health", (_req, res) => {
    res.json({ status: "ok" });
  });
  r.use("/api", requireKey(d.keys, "x-api-key"));

  const shape = (req: Request, s: Sandbox) => ({
    sandbox_id: s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION] ?? s.metadata.name,
    sandbox_url: `${d.baseUrl(req)}/aio/${s.metadata.name}/${capabilityOf(d.capabilityKey, s)}`,
    status: deerflowStatus(s),
    extra_mounts: providedMounts(s),
  });
  /**
   * The sandbox DeerFlow made under this id. Only sandboxes made through this API are seen
   * here (the id annotation marks them), so DeerFlow's adoption of what it lists never reaches
   * a sandbox another client of the same key made.
   */
  const cached = (req: Request): Sandbox | undefined => {
    const id = String(req.params.id);
    const s = d.store.get(req.apiKey!.tenant, externalSandboxName(req.apiKey!.tenant, id));
    return s && madeHere(s, id) ? s : undefined;
  };
  const notFound = (req: Request) =>
    new ApiError("NOT_FOUND", `Sandbox '${String(req.params.id)}' not found`);

  r.get("/api/capabilities", (_req, res) => {
    res.json({ lark_cli_init_image: false, lark_cli_broker_image: false });
  });

  r.post("/api/sandboxes", jsonBody(d.cfg.maxBodyBytes), async (req: Request, res: Response) => {
    const body = parse(DeerFlowCreate, req.body ?? {}, "body");
    const key = req.apiKey!;
    const name = externalSandboxName(key.tenant, body.sandbox_id);
    // DeerFlow's own provisioner serves a sandbox without a thread as the thread of its id
    // (which, unlike a thread id, may hold characters our id rule does not admit).
    const threadId = body.thread_id ?? body.sandbox_id;
    const thread = ID_PATTERN.test(threadId) ? threadId : undefined;
    const who = identity(body.user_id, thread);
    const { emptyDirs, mounts } = placeMounts(body.extra_mounts ?? [], d.cfg.deerflowMounts);
    const { sandbox } = await d.store.create({
      tenant: key.tenant,
      quota: key.maxSandboxes,
      maxResources: key.maxResources,
      name,
      pool: d.cfg.defaultPool,
      labels: who.labels,
      annotations: { ...who.annotations, [EXTERNAL_ID_ANNOTATION]: body.sandbox_id },
      spec: {
        language: "python",
        userId: body.user_id,
        ...(thread ? { threadId: thread } : {}),
        ...(emptyDirs.length ? { emptyDirs } : {}),
        ...(mounts.length ? { mounts } : {}),
      },
    });
    const current = await d.transport.ready(sandbox, { timeoutMs: CREATE_WAIT_MS }).catch(
      () => d.store.get(key.tenant, name) ?? sandbox, // answered as is; DeerFlow polls the URL
    );
    res.json(shape(req, current));
  });

  r.get("/api/sandboxes", (req: Request, res: Response) => {
    const all = d.store
      .list(req.apiKey!.tenant)
      .filter((s) => s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION] !== undefined);
    res.json({ sandboxes: all.map((s) => shape(req, s)), count: all.length });
  });

  // DeerFlow deletes a sandbox it is told is gone or not Running: what the cache shows is
  // confirmed with the API server, since another replica may have deleted it a moment ago.
  // One read by name per status check (DeerFlow checks once per acquire); a sandbox the cache
  // does not show is answered 404 at once (at worst DeerFlow then creates it again, which
  // finds the same sandbox).
  r.get("/api/sandboxes/:id", async (req: Request, res: Response) => {
    const seen = cached(req);
    const live = seen && (await d.store.getLive(req.apiKey!.tenant, seen.metadata.name));
    if (!live || live.metadata.deletionTimestamp || !madeHere(live, String(req.params.id)))
      throw notFound(req);
    res.json(shape(req, live));
  });

  r.delete("/api/sandboxes/:id", async (req: Request, res: Response) => {
    const s = cached(req);
    if (!s || s.metadata.deletionTimestamp) throw notFound(req);
    await d.store.delete(s.metadata.name);
    res.json({ ok: true, sandbox_id: String(req.params.id) });
  });

  // The sandbox_url: the AIO subset of sandboxd, opened by the capability in the path. Only
  // that subset: the native API behind the same token would let a capability holder replace
  // the sandbox's token (/v1/init) or reach what DeerFlow never asked for.
  r.all("/aio/:name/:capability/*rest", async (req: Request, res: Response) => {
    const sandbox = findByCapability(d, req);
    const segments = ([] as string[]).concat(req.params.rest ?? []).flatMap((s) => s.split("/"));
    const path = `/${segments.join("/")}`;
    if (!isAioPath(path) || segments.some((s) => s === "." || s === "..")) {
      throw new ApiError("NOT_FOUND", `a sandbox_url opens the AIO routes only, not ${path}`);
    }
    await d.transport.forward(sandbox, req, res);
  });

  return r;
}

/** Whether `s` is the sandbox DeerFlow made through this API under `id`. */
const madeHere = (s: Sandbox, id: string) =>
  s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION] === id;

/** The sandbox a capability URL names, or 404 (the same answer for a wrong capability). */
function findByCapability(d: DeerFlowDeps, req: Request): Sandbox {
  const s = d.store.getAnyTenant(String(req.params.name));
  if (
    !s ||
    s.metadata.deletionTimestamp ||
    !capabilityMatches(d.capabilityKey, s, String(req.params.capability))
  ) {
    throw new ApiError("NOT_FOUND", "no such sandbox");
  }
  return s;
}
