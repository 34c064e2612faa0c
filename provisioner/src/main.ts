/**
 * The provisioner's entry point: `node provisioner/src/main.ts`, configured by SANDPIT_*
 * variables. SIGTERM turns /readyz to 503 and keeps serving for SANDPIT_SHUTDOWN_DELAY_MS while
 * the Service drops this pod, then stops accepting, lets requests in flight finish (up to 20 s)
 * and exits.
 */
import { pino } from "pino";
import { Kube, loadKubeConfig } from "@sandpit/operator/kube/client";
import { readConfig } from "./config.ts";
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
const store = new SandboxStore(
  new Kube(loadKubeConfig(cfg.kubeconfig), { fieldManager: "sandpit-provisioner" }),
  cfg.namespace,
  log,
  cfg.activityIntervalMs,
  cfg.bounds,
);
store.start();
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
        process.exit(0);
      });
      server.closeIdleConnections();
    }, cfg.shutdownDelayMs).unref();
  });
}
