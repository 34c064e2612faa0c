/**
 * The provisioner's entry point: `node provisioner/src/main.ts`, configured by SANDPIT_*
 * variables. SIGTERM turns /readyz to 503 and keeps serving for SANDPIT_SHUTDOWN_DELAY_MS while
 * the Service drops this pod, then stops accepting, lets requests in flight finish (up to 20 s)
 * and exits.
 */
import { pino } from "pino";
import { Kube, loadKubeConfig } from "@sandpit/operator/kube/client";
import { readConfig } from "./config.ts";
import { Reservations } from "./reservations.ts";
import { SandboxStore } from "./sandboxes.ts";
import { createApp } from "./server.ts";

const cfg = (() => {
  try {
    return readConfig(process.env);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
})();
const log = pino({ level: cfg.logLevel, base: { component: "sandpit-provisioner" } });
const kube = new Kube(loadKubeConfig(cfg.kubeconfig), { fieldManager: "sandpit-provisioner" });
// Warm pods held for creates that answer without waiting on the API server. Without them (a
// Lease it may not make, say) every create takes the operator's path: slower, never failing.
const reservations =
  cfg.reservation.size > 0
    ? new Reservations(kube, cfg.namespace, log, cfg.reservation)
    : undefined;
const store = new SandboxStore(
  kube,
  cfg.namespace,
  log,
  cfg.activityIntervalMs,
  cfg.bounds,
  reservations,
);
store.start();
if (reservations) {
  reservations.start().catch((err: unknown) => {
    log.warn({ err }, "warm-pod reservations are off: creates wait for the operator");
  });
  if (cfg.defaultPool)
    void store.getPool(cfg.defaultPool).then(
      (p) => p && reservations.serve(p),
      () => undefined,
    );
}
const { server, metricsServer, beginShutdown } = createApp(cfg, store, log);
if (cfg.metricsListen) {
  const { host, port } = cfg.metricsListen;
  metricsServer.listen(port, host, () => log.info({ address: `${host}:${port}` }, "metrics"));
}
server.listen(cfg.listen.port, cfg.listen.host, () => {
  const a = server.address();
  log.info(
    {
      address: typeof a === "object" && a ? `${a.address}:${a.port}` : a,
      namespace: cfg.namespace,
    },
    "listening",
  );
});

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    log.info(
      { delayMs: cfg.shutdownDelayMs },
      "shutting down: unready, serving until the delay ends",
    );
    beginShutdown();
    setTimeout(() => {
      setTimeout(() => process.exit(0), 20_000).unref();
      metricsServer.close();
      server.close(() => {
        store.stop();
        // Held warm pods go back to the pool now, not when the Lease runs out.
        void (reservations?.stop() ?? Promise.resolve()).finally(() => process.exit(0));
      });
      server.closeIdleConnections();
    }, cfg.shutdownDelayMs).unref();
  });
}
