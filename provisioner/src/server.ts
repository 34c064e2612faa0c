/**
 * The provisioner's HTTP server: the native API, the DeerFlow-compatible API, upgrades
 * (WebSocket, TCP tunnels) on the proxy paths, /openapi.json generated from the zod schemas, and
 * /healthz /readyz /metrics. State lives in the Sandbox resources only.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { Duplex } from "node:stream";
import express, { type Request } from "express";
import type { Logger } from "pino";
import { Counter, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { z } from "zod";
import { KeyRing, authenticate } from "./api/auth.ts";
import { deerflowRouter } from "./api/deerflow.ts";
import { ApiError, endSocket, errorHandler, toApiError } from "./api/errors.ts";
import { nativeRouter, parsePort, readyForTraffic } from "./api/native.ts";
import {
  CreateSandbox,
  DeerFlowCreate,
  DeerFlowSandbox,
  ErrorBody,
  SandboxList,
  SandboxView,
} from "./api/schemas.ts";
import type { ProvisionerConfig } from "./config.ts";
import { type Destination, proxyUpgrade, splitEndpoint } from "./proxy.ts";
import { SandboxStore } from "./sandboxes.ts";

export interface App {
  server: Server;
  registry: Registry;
  /** From now on /readyz says 503, so the Service stops sending new traffic here. */
  beginShutdown: () => void;
}

export function createApp(cfg: ProvisionerConfig, store: SandboxStore, log: Logger): App {
  const keys = new KeyRing(cfg.keys);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: "sandpit_provisioner_requests_total",
    help: "HTTP requests by route and status code",
    labelNames: ["route", "method", "code"] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "sandpit_provisioner_request_duration_seconds",
    help: "HTTP request duration by route (proxied streams included)",
    labelNames: ["route"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  });
  const baseUrl = (req: Request) => cfg.publicUrl ?? `${req.protocol}://${req.get("host")}`;

  const app = express();
  app.disable("x-powered-by");
  app.set("query parser", "simple");
  app.use((req, res, next) => {
    const end = duration.startTimer();
    res.on("close", () => {
      const route = routeLabel(req.route?.path, req.path);
      end({ route });
      requests.inc({ route, method: req.method, code: String(res.statusCode) });
    });
    next();
  });
  let shuttingDown = false;
  // While draining, every answer closes its connection: clients reconnect through the Service,
  // which by then routes to a replica that stays, instead of reusing a socket that will close.
  app.use((_req, res, next) => {
    if (shuttingDown) res.setHeader("connection", "close");
    next();
  });
  app.get("/healthz", (_req, res) => {
    res.type("text/plain").send("ok\n");
  });
  app.get("/readyz", (_req, res) => {
    if (shuttingDown) res.status(503).type("text/plain").send("shutting down\n");
    else if (store.isSynced) res.type("text/plain").send("ok\n");
    else res.status(503).type("text/plain").send("sandbox cache not synced\n");
  });
  app.get("/metrics", async (_req, res) => {
    res.type(registry.contentType).send(await registry.metrics());
  });
  app.get("/openapi.json", (_req, res) => {
    res.json(openApi());
  });
  app.use(nativeRouter({ cfg, store, keys, baseUrl }));
  app.use(deerflowRouter({ cfg, store, keys, baseUrl }));
  app.use((_req, res) => {
    res.status(404).json({ error: { code: "NOT_FOUND", message: "no such route" } });
  });
  app.use(errorHandler(log));

  const server = createServer(app);
  // What Node's parser refuses before express sees it (headers too large, malformed requests)
  // gets the same JSON error as everything else.
  server.on(
    "clientError",
    (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) => {
      if (err.code === "ECONNRESET" || !socket.writable) return socket.destroy();
      const e =
        err.code === "HPE_HEADER_OVERFLOW"
          ? new ApiError(431, "PAYLOAD_TOO_LARGE", "request line and headers are too large")
          : new ApiError(
              err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400,
              "INVALID_ARGUMENT",
              `malformed HTTP request (${err.code ?? err.message})`,
            );
      endSocket(socket, e, err.rawPacket?.toString("latin1", 0, 5) !== "HEAD ");
    },
  );
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    handleUpgrade(req, socket, head, keys, store, cfg).catch((err: unknown) => {
      const e = toApiError(err);
      if (e.status >= 500) log.error({ err }, "upgrade failed");
      endSocket(socket, e);
    });
  });
  return {
    server,
    registry,
    beginShutdown: () => {
      shuttingDown = true;
    },
  };
}

/**
 * Upgrades (API key) on /v1/sandboxes/:id/proxy/... are spliced through to sandboxd, and on
 * /v1/sandboxes/:id/ports/:port/... to that port inside the sandbox (a WebSocket server, say).
 */
async function handleUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  keys: KeyRing,
  store: SandboxStore,
  cfg: ProvisionerConfig,
): Promise<void> {
  const url = new URL(req.url ?? "/", "http://x");
  const m = /^\/v1\/sandboxes\/([^/]+)\/(?:proxy|ports\/([^/]+))(\/.*)?$/.exec(url.pathname);
  if (!m || (m[2] === undefined && !m[3]))
    throw new ApiError(
      404,
      "NOT_FOUND",
      "upgrades are only proxied under /v1/sandboxes/:id/proxy/ and /v1/sandboxes/:id/ports/:port/",
    );
  const key = authenticate(keys, req.headers, "bearer");
  const to: Destination =
    m[2] === undefined ? { kind: "sandboxd" } : { kind: "port", port: parsePort(m[2]) };
  const found = store.get(key.tenant, safeDecode(m[1]!));
  if (!found) throw new ApiError(404, "NOT_FOUND", "no such sandbox");
  const s = await readyForTraffic(store, found, cfg.readyTimeoutMs);
  const active = () => void store.reportActivity(s.metadata.name);
  active();
  proxyUpgrade(
    req,
    socket,
    head,
    { ...splitEndpoint(s.status!.endpoint!), token: await store.token(s) },
    `${m[3] ?? "/"}${url.search}`,
    to,
    active,
  );
}

/** A path segment, percent-decoded; a malformed escape is a 400, not a crash. */
function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new ApiError(400, "INVALID_ARGUMENT", `malformed percent-encoding in "${segment}"`);
  }
}

/** Route labels stay few: parameters are not part of them. */
function routeLabel(route: unknown, path: string): string {
  if (typeof route === "string") return route;
  return path.startsWith("/aio/") ? "/aio/*" : "unmatched";
}

function openApi() {
  const schema = (s: z.ZodType) => z.toJSONSchema(s, { io: "input", unrepresentable: "any" });
  const ok = (s: z.ZodType, description: string) => ({
    description,
    content: { "application/json": { schema: schema(s) } },
  });
  const err = {
    description: "error",
    content: { "application/json": { schema: schema(ErrorBody) } },
  };
  const id = [{ name: "id", in: "path", required: true, schema: { type: "string" } }];
  return {
    openapi: "3.1.0",
    info: { title: "Sandpit provisioner", version: "0.1.0" },
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer" },
        apiKey: { type: "apiKey", in: "header", name: "X-API-Key" },
      },
    },
    security: [{ bearer: [] }],
    paths: {
      "/v1/sandboxes": {
        post: {
          summary:
            "Create a sandbox (idempotent per user and thread); waits for Ready unless wait is false",
          requestBody: { content: { "application/json": { schema: schema(CreateSandbox) } } },
          responses: {
            200: ok(SandboxView, "the existing sandbox"),
            201: ok(SandboxView, "created"),
            400: err,
            401: err,
            429: err,
            504: err,
          },
        },
        get: {
          summary: "List sandboxes, filtered by label=key=value",
          responses: { 200: ok(SandboxList, "sandboxes"), 401: err },
        },
      },
      "/v1/sandboxes/{id}": {
        get: { parameters: id, responses: { 200: ok(SandboxView, "the sandbox"), 404: err } },
        delete: { parameters: id, responses: { 204: { description: "deleted" }, 404: err } },
      },
      "/v1/sandboxes/{id}/pause": {
        post: { parameters: id, responses: { 202: ok(SandboxView, "suspending"), 404: err } },
      },
      "/v1/sandboxes/{id}/resume": {
        post: {
          parameters: id,
          responses: { 200: ok(SandboxView, "Ready again"), 404: err, 429: err },
        },
      },
      "/v1/sandboxes/{id}/keepalive": {
        post: {
          parameters: id,
          responses: { 204: { description: "activity recorded" }, 404: err },
        },
      },
      "/v1/sandboxes/{id}/proxy/{path}": {
        summary:
          "Any method: forwarded to sandboxd (bodies streamed; upgrades spliced); resumes a suspended sandbox first",
        parameters: [
          ...id,
          { name: "path", in: "path", required: true, schema: { type: "string" } },
        ],
      },
      "/v1/sandboxes/{id}/ports/{port}/{path}": {
        summary:
          "Any method: forwarded to a server listening on {port} inside the sandbox, through sandboxd's tunnel (bodies streamed; WebSocket upgrades spliced); 502 when nothing listens there",
        parameters: [
          ...id,
          {
            name: "port",
            in: "path",
            required: true,
            schema: { type: "integer", minimum: 1, maximum: 65535 },
          },
          { name: "path", in: "path", required: true, schema: { type: "string" } },
        ],
      },
      "/api/sandboxes": {
        post: {
          security: [{ apiKey: [] }],
          requestBody: { content: { "application/json": { schema: schema(DeerFlowCreate) } } },
          responses: {
            200: ok(DeerFlowSandbox, "DeerFlow-compatible sandbox"),
            400: err,
            401: err,
          },
        },
        get: {
          security: [{ apiKey: [] }],
          responses: { 200: { description: "{sandboxes, count}" } },
        },
      },
      "/api/sandboxes/{id}": {
        get: {
          security: [{ apiKey: [] }],
          parameters: id,
          responses: { 200: ok(DeerFlowSandbox, "the sandbox"), 404: err },
        },
        delete: {
          security: [{ apiKey: [] }],
          parameters: id,
          responses: { 200: { description: "{ok, sandbox_id}" }, 404: err },
        },
      },
      "/health": { get: { security: [], responses: { 200: { description: '{"status":"ok"}' } } } },
      "/healthz": { get: { security: [], responses: { 200: { description: "alive" } } } },
      "/readyz": {
        get: {
          security: [],
          responses: { 200: { description: "cache synced" }, 503: { description: "not yet" } },
        },
      },
      "/metrics": {
        get: { security: [], responses: { 200: { description: "Prometheus metrics" } } },
      },
    },
  };
}
