/**
 * The native API (docs/architecture.md): create (waiting for Ready, idempotent per user and
 * thread), get, list by label, delete, pause, resume, keepalive, and the streaming proxy to
 * sandboxd and to ports inside the sandbox, upgrades included.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { Router, type Request, type Response } from "express";
import { isPort } from "@sandpit/sandboxd/protocol";
import { type KeyRing, authenticate, requireKey } from "./auth.ts";
import { ApiError, notFound, parse } from "./errors.ts";
import { jsonBody } from "./json-body.ts";
import { CreateSandbox, ListQuery, SetTimeout } from "./schemas.ts";
import { packageOfSpec } from "@sandpit/operator/api";
import type { ProvisionerConfig } from "../config.ts";
import type { Destination } from "../proxy.ts";
import {
  LABEL,
  type Sandbox,
  SandboxUnavailable,
  identity,
  labelSafe,
  threadSandboxName,
} from "../sandboxes.ts";
import { MAX_LIFETIME_S, lifetimePatch, livedSeconds } from "../lifetime.ts";
import type { SandboxBackend } from "../store.ts";
import { type Transport, abortedBy } from "../transport.ts";

export interface NativeDeps {
  cfg: ProvisionerConfig;
  store: SandboxBackend;
  keys: KeyRing;
  transport: Transport;
  baseUrl: (req: Request) => string;
}

export function view(s: Sandbox, base: string, token?: string) {
  return {
    id: s.metadata.name,
    url: `${base}/v1/sandboxes/${s.metadata.name}/proxy`,
    ...(token ? { token } : {}),
    phase: s.status?.phase ?? "Pending",
    ...(s.status?.endpoint ? { endpoint: s.status.endpoint } : {}),
    ...(s.status?.expiresAt ? { expiresAt: s.status.expiresAt } : {}),
    ...(s.metadata.creationTimestamp ? { createdAt: s.metadata.creationTimestamp } : {}),
    ...(s.spec.poolRef ? { pool: s.spec.poolRef } : {}),
    ...(s.spec.language ? { language: s.spec.language } : {}),
    ...(s.spec.resources ? { resources: s.spec.resources } : {}),
    ...(s.spec.threadId ? { threadId: s.spec.threadId } : {}),
    ...(s.spec.userId ? { userId: s.spec.userId } : {}),
    labels: Object.fromEntries(
      Object.entries(s.metadata.labels ?? {}).filter(([k]) => !k.startsWith("app.kubernetes.io/")),
    ),
  };
}

/** The operator's longest lifetime (its Lifecycle schema). */

export function nativeRouter(d: NativeDeps): Router {
  const r = Router();
  const body = jsonBody(d.cfg.maxBodyBytes);
  r.use("/v1/sandboxes", requireKey(d.keys, "bearer"));

  const owned = (req: Request): Sandbox => {
    const id = String(req.params.id);
    const s = d.store.get(req.apiKey!.tenant, id);
    if (!s || s.metadata.deletionTimestamp) throw notFound(id);
    return s;
  };

  r.post("/v1/sandboxes", body, async (req: Request, res: Response) => {
    const input = parse(CreateSandbox, req.body ?? {}, "body");
    const key = req.apiKey!;
    const userId = input.userId ?? "default";
    const name = threadSandboxName(key.tenant, userId, input.threadId);
    const who = identity(userId, input.threadId);
    const { sandbox, created } = await d.store.create({
      tenant: key.tenant,
      quota: key.maxSandboxes,
      maxResources: key.maxResources,
      ...(name ? { name } : {}),
      pool: input.pool ?? d.cfg.defaultPool,
      labels: { ...input.labels, ...who.labels },
      annotations: who.annotations,
      spec: {
        language: input.language,
        ...(input.packages?.length ? { packages: input.packages.map(packageOfSpec) } : {}),
        ...(input.env
          ? { env: Object.entries(input.env).map(([k, v]) => ({ name: k, value: v })) }
          : {}),
        ...(input.resources ? { resources: input.resources } : {}),
        ...(input.network === "deny" ? { network: { egress: "Deny" as const } } : {}),
        ...(input.ttlSeconds || input.idleTimeoutSeconds
          ? {
              lifecycle: {
                ttlSeconds: input.ttlSeconds,
                idleTimeoutSeconds: input.idleTimeoutSeconds,
                suspended: false,
              },
            }
          : {}),
        ...(input.threadId ? { threadId: input.threadId } : {}),
        userId,
      },
    });
    let current = sandbox;
    if (input.wait) {
      try {
        current = await d.transport.ready(current, { signal: abortedBy(req) });
      } catch (err) {
        // A sandbox this call made that can never start (its packages do not install) is
        // removed: the caller gets the error and no handle to clean it up with.
        if (created && err instanceof SandboxUnavailable && err.kind === "packages") {
          await d.store.delete(current.metadata.name).catch(() => undefined);
        }
        throw err;
      }
    }
    const token = current.status?.phase === "Ready" ? await d.store.token(current) : undefined;
    res.status(created ? 201 : 200).json(view(current, d.baseUrl(req), token));
  });

  r.get("/v1/sandboxes", (req: Request, res: Response) => {
    const q = parse(ListQuery, req.query, "query");
    const selectors = ([] as string[]).concat(q.label ?? []);
    const labels: Record<string, string> = {};
    for (const sel of selectors) {
      const [k, v, ...rest] = sel.split("=");
      if (!k || v === undefined || rest.length)
        throw new ApiError("INVALID_ARGUMENT", `label must be key=value, got "${sel}"`);
      // User and thread are selected by the value their label holds.
      labels[k] = k === LABEL.user || k === LABEL.thread ? labelSafe(v) : v;
    }
    res.json({
      sandboxes: d.store.list(req.apiKey!.tenant, labels).map((s) => view(s, d.baseUrl(req))),
    });
  });

  r.get("/v1/sandboxes/:id", (req: Request, res: Response) => {
    res.json(view(owned(req), d.baseUrl(req)));
  });

  r.delete("/v1/sandboxes/:id", async (req: Request, res: Response) => {
    await d.store.delete(owned(req).metadata.name);
    res.status(204).end();
  });

  r.post("/v1/sandboxes/:id/pause", async (req: Request, res: Response) => {
    const s = owned(req);
    await d.store.setSuspended(s.metadata.name, true);
    res.status(202).json({ ...view(s, d.baseUrl(req)), phase: "Suspended" });
  });

  r.post("/v1/sandboxes/:id/resume", async (req: Request, res: Response) => {
    const s = owned(req);
    await d.store.setSuspended(s.metadata.name, false);
    const ready = await d.store.waitReady(s.metadata.name, d.cfg.readyTimeoutMs, abortedBy(req));
    res.json(view(ready, d.baseUrl(req), await d.store.token(ready)));
  });

  // A new end of life, counted from now. The Sandbox's TTL counts from its creation, so the
  // time it has lived is added; an idle timeout longer than what is left is shortened to it.
  r.post("/v1/sandboxes/:id/timeout", body, async (req: Request, res: Response) => {
    const { timeoutSeconds } = parse(SetTimeout, req.body ?? {}, "body");
    const s = owned(req);
    const ttlSeconds = livedSeconds(s) + timeoutSeconds;
    if (ttlSeconds > MAX_LIFETIME_S)
      throw new ApiError(
        "INVALID_ARGUMENT",
        `timeoutSeconds: the sandbox has lived ${ttlSeconds - timeoutSeconds}s and may live ${MAX_LIFETIME_S}s in all`,
      );
    await d.store.setLifecycle(s.metadata.name, lifetimePatch(s, ttlSeconds));
    const expiresAt = new Date(Date.parse(s.metadata.creationTimestamp!) + ttlSeconds * 1000);
    res.json({ ...view(s, d.baseUrl(req)), expiresAt: expiresAt.toISOString() });
  });

  r.post("/v1/sandboxes/:id/keepalive", async (req: Request, res: Response) => {
    await d.store.reportActivity(owned(req).metadata.name, true);
    res.status(204).end();
  });

  // Everything under proxy/ goes to sandboxd as is, bodies streamed (no body parser here).
  r.all("/v1/sandboxes/:id/proxy/*rest", async (req: Request, res: Response) => {
    await d.transport.forward(owned(req), req, res);
  });

  // A server the sandbox runs on `port` (a dev server, a notebook), over HTTP: the rest of the
  // path goes to 127.0.0.1:<port> inside, through sandboxd's tunnel.
  r.all("/v1/sandboxes/:id/ports/:port{/*rest}", async (req: Request, res: Response) => {
    const port = parsePort(req.params.port);
    await d.transport.forward(owned(req), req, res, { kind: "port", port });
  });

  return r;
}

/**
 * Upgrades (API key) on /v1/sandboxes/:id/proxy/... are spliced through to sandboxd, and on
 * /v1/sandboxes/:id/ports/:port/... to that port inside the sandbox (a WebSocket server, say).
 * They never reach express, so the path is matched here.
 */
export function nativeUpgrade(d: NativeDeps) {
  return async (req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://x");
    const m = /^\/v1\/sandboxes\/([^/]+)\/(?:proxy|ports\/([^/]+))(\/.*)?$/.exec(url.pathname);
    if (!m || (m[2] === undefined && !m[3]))
      throw new ApiError(
        "NOT_FOUND",
        "upgrades are only proxied under /v1/sandboxes/:id/proxy/ and /v1/sandboxes/:id/ports/:port/",
      );
    const key = authenticate(d.keys, req.headers, "bearer");
    const to: Destination =
      m[2] === undefined ? { kind: "sandboxd" } : { kind: "port", port: parsePort(m[2]) };
    const found = d.store.get(key.tenant, safeDecode(m[1]!));
    if (!found) throw new ApiError("NOT_FOUND", "no such sandbox");
    await d.transport.upgrade(found, req, socket, head, `${m[3] ?? "/"}${url.search}`, to);
  };
}

/** A path segment, percent-decoded; a malformed escape is a 400, not a crash. */
function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new ApiError("INVALID_ARGUMENT", `malformed percent-encoding in "${segment}"`);
  }
}

/** A port number from a path segment: 1-65535, or a 400 saying so. */
function parsePort(raw: unknown): number {
  const port = /^\d{1,5}$/.test(String(raw)) ? Number(raw) : NaN;
  if (!isPort(port))
    throw new ApiError(
      "INVALID_ARGUMENT",
      `port: must be a number from 1 to 65535, not "${String(raw)}"`,
    );
  return port;
}
