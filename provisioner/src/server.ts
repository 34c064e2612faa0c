/**
 * The provisioner's HTTP server, wired: the native API, the DeerFlow- and E2B-compatible APIs
 * (./api/e2b/, ahead of the rest: it routes by host and header too), upgrades
 * (WebSocket, TCP tunnels) on the proxy paths, and the service's own routes. State lives in the
 * store (./store.ts) only; every route that sends a sandbox traffic goes through one Transport.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { isIPv6 } from "node:net";
import express, { type Request } from "express";
import type { Logger } from "pino";
import type { Registry } from "prom-client";
import { KeyRing } from "./api/auth.ts";
import { deerflowRouter } from "./api/deerflow.ts";
import { e2bApi } from "./api/e2b/index.ts";
import { ApiError, clientErrorHandler, errorHandler, upgradeErrorHandler } from "./api/errors.ts";
import { nativeRouter, nativeUpgrade } from "./api/native.ts";
import { opsRouter } from "./api/ops.ts";
import type { ProvisionerConfig } from "./config.ts";
import { httpMetrics } from "./metrics.ts";
import type { SandboxBackend } from "./store.ts";
import { Transport } from "./transport.ts";

export interface App {
  server: Server;
  /** /metrics alone, for its own port (SANDPIT_METRICS_LISTEN); the caller listens. */
  metricsServer: Server;
  registry: Registry;
  /** From now on /readyz says 503, so the Service stops sending new traffic here. */
  beginShutdown: () => void;
}

export function createApp(cfg: ProvisionerConfig, store: SandboxBackend, log: Logger): App {
  const { registry, middleware: metrics } = httpMetrics();
  const deps = {
    cfg,
    store,
    keys: new KeyRing(cfg.keys),
    transport: new Transport(store, cfg.readyTimeoutMs),
    baseUrl: (req: Request) => cfg.publicUrl ?? arrivedAt(req),
    capabilityKey: cfg.capabilityKey ?? randomCapabilityKey(log),
  };
  let shuttingDown = false;
  // First in line: E2B's hosts and its data plane's /health and /metrics are not the service's.
  const e2b = e2bApi(deps, log);

  const app = express();
  app.disable("x-powered-by");
  app.set("query parser", "simple");
  app.use(metrics);
  // While draining, every answer closes its connection: clients reconnect through the Service,
  // which by then routes to a replica that stays, instead of reusing a socket that will close.
  app.use((_req, res, next) => {
    if (shuttingDown) res.setHeader("connection", "close");
    next();
  });
  app.use(e2b.middleware);
  app.use(
    opsRouter({
      notReady: () =>
        shuttingDown ? "shutting down" : store.isSynced ? undefined : "sandbox cache not synced",
    }),
  );
  app.use(nativeRouter(deps));
  app.use(deerflowRouter(deps));
  app.use((_req, _res, next) => next(new ApiError("NOT_FOUND", "no such route")));
  app.use(errorHandler(log));

  const server = createServer(app);
  // Clients keep connections between their calls (the SDK does, per sandbox); closed after Node's
  // default 5 s of silence, a connection is often closed just as a client's next call goes out
  // on it, which fails that call. As sandboxd does, and longer than the idle timeouts load
  // balancers commonly use (60 s), so that they, not this server, close idle connections.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.on("clientError", clientErrorHandler);
  const upgrade = nativeUpgrade(deps);
  const upgradeFailed = upgradeErrorHandler(log);
  server.on("upgrade", (req, socket, head) => {
    (e2b.upgrade(req, socket, head) ?? upgrade(req, socket, head)).catch((err: unknown) =>
      upgradeFailed(err, socket),
    );
  });
  return {
    server,
    metricsServer: metricsOnly(registry),
    registry,
    beginShutdown: () => {
      shuttingDown = true;
    },
  };
}

/**
 * The base URL from the address this connection reached, never from its Host header: a client
 * (or anything between it and us) chooses the header, so reflecting it would let a caller have
 * Sandpit hand out URLs that point elsewhere. Deployments behind an Ingress or a Service name set
 * SANDPIT_PUBLIC_URL (the chart always does).
 */
function arrivedAt(req: Request): string {
  const host = (req.socket.localAddress ?? "127.0.0.1").replace(/^::ffff:/, "");
  return `http://${isIPv6(host) ? `[${host}]` : host}:${req.socket.localPort}`;
}

/** A server answering GET /metrics and nothing else. */
function metricsOnly(registry: Registry): Server {
  return createServer((req, res) => {
    if (req.method !== "GET" || req.url?.split("?")[0] !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("only /metrics is served here\n");
      return;
    }
    registry.metrics().then(
      (body) => res.writeHead(200, { "content-type": registry.contentType }).end(body),
      (err: unknown) => res.writeHead(500, { "content-type": "text/plain" }).end(`${err}\n`),
    );
  });
}

/** No SANDPIT_CAPABILITY_KEY: this process's own, so its sandbox_urls die with it. */
function randomCapabilityKey(log: Logger): Buffer {
  log.warn(
    "SANDPIT_CAPABILITY_KEY is not set: DeerFlow sandbox_urls change when this process restarts and differ between replicas",
  );
  return randomBytes(32);
}
