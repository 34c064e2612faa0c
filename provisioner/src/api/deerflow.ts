/**
 * DeerFlow's provisioner API (`provisioner_url`), so DeerFlow works against Sandpit unchanged:
 * `/api/sandboxes` with `X-API-Key`, and `/health`. The `sandbox_url` returned serves the AIO
 * subset of sandboxd through the proxy. DeerFlow sends no credential to the sandbox itself, so
 * the URL carries an unguessable capability (192 random bits) in its path instead.
 */
import { Router, json, type Request, type Response } from "express";
import { ID_PATTERN } from "@sandpit/sandboxd/protocol";
import { type KeyRing, requireKey } from "./auth.ts";
import { ApiError, parse } from "./errors.ts";
import { DeerFlowCreate } from "./schemas.ts";
import type { ProvisionerConfig } from "../config.ts";
import {
  CAPABILITY_ANNOTATION,
  EXTERNAL_ID_ANNOTATION,
  LABEL,
  type Sandbox,
  SandboxStore,
  externalSandboxName,
} from "../sandboxes.ts";
import type { Transport } from "../transport.ts";

export interface DeerFlowDeps {
  cfg: ProvisionerConfig;
  store: SandboxStore;
  keys: KeyRing;
  transport: Transport;
  baseUrl: (req: Request) => string;
}

/** How long a create waits for Ready before answering Pending (DeerFlow's client waits 30 s). */
const CREATE_WAIT_MS = 25_000;

/** DeerFlow reads a pod phase: Running means usable. */
const statusOf = (s: Sandbox) =>
  s.status?.phase === "Ready" ? "Running" : (s.status?.phase ?? "Pending");

export function deerflowRouter(d: DeerFlowDeps): Router {
  const r = Router();
  r.get("/health", (_req, res) => {
    res.json({ status: "ok" });
  });
  r.use("/api", requireKey(d.keys, "x-api-key"));

  const shape = (req: Request, s: Sandbox) => ({
    sandbox_id: s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION] ?? s.metadata.name,
    sandbox_url: `${d.baseUrl(req)}/aio/${s.metadata.name}/${s.metadata.annotations?.[CAPABILITY_ANNOTATION]}`,
    status: statusOf(s),
  });
  const find = (req: Request) => {
    const id = String(req.params.id);
    const s = d.store.get(req.apiKey!.tenant, externalSandboxName(req.apiKey!.tenant, id));
    if (!s || s.metadata.deletionTimestamp)
      throw new ApiError("NOT_FOUND", `Sandbox '${id}' not found`);
    return s;
  };

  r.get("/api/capabilities", (_req, res) => {
    res.json({ lark_cli_init_image: false, lark_cli_broker_image: false });
  });

  r.post(
    "/api/sandboxes",
    json({ limit: d.cfg.maxBodyBytes }),
    async (req: Request, res: Response) => {
      const body = parse(DeerFlowCreate, req.body ?? {}, "body");
      if (body.extra_mounts?.length) {
        throw new ApiError(
          "INVALID_ARGUMENT",
          "extra_mounts are not supported: sandboxes never see host paths",
        );
      }
      const key = req.apiKey!;
      const name = externalSandboxName(key.tenant, body.sandbox_id);
      const threadId =
        body.thread_id ?? (ID_PATTERN.test(body.sandbox_id) ? body.sandbox_id : undefined);
      const { sandbox } = await d.store.create({
        tenant: key.tenant,
        quota: key.maxSandboxes,
        name,
        pool: d.cfg.defaultPool,
        labels: { [LABEL.user]: body.user_id, ...(threadId ? { [LABEL.thread]: threadId } : {}) },
        annotations: { [EXTERNAL_ID_ANNOTATION]: body.sandbox_id },
        spec: { language: "python", userId: body.user_id, ...(threadId ? { threadId } : {}) },
      });
      const current = await d.transport.ready(sandbox, { timeoutMs: CREATE_WAIT_MS }).catch(
        () => d.store.get(key.tenant, name) ?? sandbox, // report Pending; DeerFlow polls
      );
      res.json(shape(req, current));
    },
  );

  r.get("/api/sandboxes", (req: Request, res: Response) => {
    const all = d.store
      .list(req.apiKey!.tenant)
      .filter((s) => s.metadata.annotations?.[EXTERNAL_ID_ANNOTATION]);
    res.json({ sandboxes: all.map((s) => shape(req, s)), count: all.length });
  });

  r.get("/api/sandboxes/:id", (req: Request, res: Response) => {
    res.json(shape(req, find(req)));
  });

  r.delete("/api/sandboxes/:id", async (req: Request, res: Response) => {
    const s = find(req);
    await d.store.delete(s.metadata.name);
    res.json({ ok: true, sandbox_id: String(req.params.id) });
  });

  // The sandbox_url: the AIO subset of sandboxd, opened by the capability in the path.
  r.all("/aio/:name/:capability/*rest", async (req: Request, res: Response) => {
    await d.transport.forward(findByCapability(d.store, req), req, res);
  });

  return r;
}

/** The sandbox a capability URL names, or 404 (the same answer for a wrong capability). */
function findByCapability(store: SandboxStore, req: Request): Sandbox {
  const s = store.getAnyTenant(String(req.params.name));
  if (
    !s ||
    s.metadata.deletionTimestamp ||
    !SandboxStore.capabilityMatches(s, String(req.params.capability))
  ) {
    throw new ApiError("NOT_FOUND", "no such sandbox");
  }
  return s;
}
