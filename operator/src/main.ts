/**
 * The operator's entry point: `node operator/src/main.ts` out of cluster (SANDPIT_KUBECONFIG or
 * KUBECONFIG), or the container command in cluster (the service account). SIGTERM and SIGINT
 * shut down gracefully; losing leadership exits at once so the new leader acts alone.
 */
import { pino } from "pino";
import { readConfig } from "./config.ts";
import { Manager } from "./manager.ts";

const cfg = (() => {
  try {
    return readConfig(process.env);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
})();
const log = pino({ level: cfg.logLevel, base: { component: "sandpit-operator" } });
const manager = new Manager(cfg, log);

let signals = 0;
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => {
    if (++signals > 1) process.exit(130); // a second signal means "now"
    const force = setTimeout(() => process.exit(1), 25_000);
    force.unref();
    manager.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  });
}

manager.done.then((why) => {
  log.error({ why }, "exiting");
  process.exit(1);
});

manager.start().catch((err: unknown) => {
  log.fatal({ err }, "the operator could not start");
  process.exit(1);
});
