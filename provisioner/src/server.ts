/**
 * The provisioner's HTTP server, wired: the native API, the DeerFlow- and E2B-compatible APIs
 * (./api/e2b/, ahead of the rest: it routes by host and header too), upgrades
 * (WebSocket, TCP tunnels) on the proxy paths, and the service's own routes. State lives in the
 * store (./store.ts) only; every route that sends a sandbox traffic goes through one Transport.
 */
import { createServer, type Server } from "node:http";
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
    baseUrl: (req: Request) => cfg.publicUrl ?? `${req.protocol}://${req.get("host")}`,
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
      registry,
      notReady: () =>
        shuttingDown ? "shutting down" : store.isSynced ? undefined : "sandbox cache not synced",
    }),
  );
  app.use(nativeRouter(deps));
  app.use(deerflowRouter(deps));
  app.use((_req, _res, next) => next(new ApiError("NOT_FOUND", "no such route")));
  app.use(errorHandler(log));

  const server = createServer(app);
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
    registry,
    beginShutdown: () => {
      shuttingDown = true;
    },
  };
}
