/**
 * `sandpit serve`: the provisioner's APIs (native, DeerFlow- and E2B-compatible) on one port, without
 * Kubernetes: sandboxes come from an SDK provider, Docker when an engine answers, else local
 * (bubblewrap); or from a cluster's Sandpit operator with `--backend kubernetes`. docs/serve.md.
 *
 *   node provisioner/src/serve/main.ts [--backend auto|docker|local|kubernetes] [--port 8080]
 *
 * The same routes, keys, quotas, errors and proxy as the provisioner (../server.ts); the store
 * behind them is ./provider-store.ts, or ../sandboxes.ts for kubernetes.
 */
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pino, type Logger } from "pino";
import { LocalProvider, type SandboxProvider } from "@sandpit/sdk";
import { DockerProvider } from "@sandpit/sdk/docker";
import { Kube, loadKubeConfig } from "@sandpit/operator/kube/client";
import { type ProvisionerConfig, readConfig } from "../config.ts";
import { SandboxStore } from "../sandboxes.ts";
import { E2B_PREFIX } from "../api/e2b/index.ts";
import { createApp } from "../server.ts";
import type { SandboxBackend } from "../store.ts";
import { type ServeSupport } from "./platform.ts";
import { describeFirst, firstSandbox } from "./first-sandbox.ts";
import { ProviderStore } from "./provider-store.ts";
import { defaultStateDir, e2bTokenSecret, generatedKeysFile, openState } from "./state.ts";

export type ServeBackend = "auto" | "docker" | "local" | "kubernetes";

export interface ServeOptions {
  backend?: ServeBackend;
  /** Default 127.0.0.1: the APIs run code; expose them on purpose (`--host 0.0.0.0`). */
  host?: string;
  /** Default 8080; 0 picks a free port (the URL printed says which). */
  port?: number;
  /** Default: defaultStateDir (./state.ts). */
  stateDir?: string;
  /** Docker: blank containers kept running so a create skips the cold start. Default 1. */
  warm?: number;
  /** Docker: the sandbox image. */
  image?: string;
  /** Pause a sandbox after this long without traffic (unless it names its own); 0: never. */
  idleTimeoutMs?: number;
  /** How often TTLs and idle timeouts are checked. */
  reapIntervalMs?: number;
  /** kubernetes: the kubeconfig (default: the usual lookup) and the sandboxes' namespace. */
  kubeconfig?: string;
  namespace?: string;
  /**
   * SANDPIT_* settings as the provisioner reads them (../config.ts): SANDPIT_API_KEYS or
   * SANDPIT_API_KEYS_FILE, SANDPIT_MAX_BODY_BYTES, SANDPIT_READY_TIMEOUT_MS, ... Without keys,
   * one is generated into the state directory.
   */
  env?: NodeJS.ProcessEnv;
  log?: Logger;
}

export interface Serving {
  url: string;
  /** The E2B-compatible API: the SDKs' E2B_API_URL and E2B_SANDBOX_URL. */
  e2bUrl: string;
  backend: Exclude<ServeBackend, "auto">;
  stateDir: string;
  /** The key generated into the state directory; undefined when keys were given. */
  generatedKey: string | undefined;
  /** A key serve accepts: the generated one, else the first of those given. */
  apiKey: string;
  /** Stops serving and lets go of the backend; sandboxes stay (local ones paused). */
  close(): Promise<void>;
}

const DEFAULT_IDLE_MS = 15 * 60_000;

export async function startServe(o: ServeOptions = {}): Promise<Serving> {
  const env = o.env ?? process.env;
  const log = o.log ?? pino({ level: env.SANDPIT_LOG_LEVEL ?? "warn" }, pino.destination(2));
  const state = await openState(o.stateDir ?? defaultStateDir(env));
  const generated =
    env.SANDPIT_API_KEYS || env.SANDPIT_API_KEYS_FILE
      ? undefined
      : await generatedKeysFile(state.dir);
  // The E2B-compatible API is on out of the box: its token secret is the state's own unless
  // one is given.
  const e2bSecret = env.SANDPIT_E2B_TOKEN_SECRET ?? (await e2bTokenSecret(state.dir));
  const cfg: ProvisionerConfig = {
    ...readConfig({
      ...env,
      ...(generated ? { SANDPIT_API_KEYS_FILE: generated.path } : {}),
      SANDPIT_E2B_TOKEN_SECRET: e2bSecret,
      // The state's own key, so a restarted serve hands out the same sandbox_urls.
      SANDPIT_CAPABILITY_KEY: env.SANDPIT_CAPABILITY_KEY ?? state.secret.toString("base64url"),
    }),
    listen: { host: o.host ?? "127.0.0.1", port: o.port ?? 8080 },
    metricsListen: undefined, // one process on a laptop: nothing scrapes it
    ...(o.namespace ? { namespace: o.namespace } : {}),
  };
  const { backend, store, close } = await openBackend(o, cfg, state, log);
  store.start();
  try {
    await store.synced;
  } catch (err) {
    await close();
    throw err;
  }
  const { server, beginShutdown } = createApp(cfg, store, log);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(cfg.listen.port, cfg.listen.host, () => resolve());
  }).catch(async (err: unknown) => {
    await close();
    throw err;
  });
  const a = server.address() as AddressInfo;
  const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
  return {
    url: `http://${host}:${a.port}`,
    e2bUrl: `http://${host}:${a.port}${E2B_PREFIX}`,
    backend,
    stateDir: state.dir,
    generatedKey: generated?.firstKey,
    apiKey: cfg.keys[0]!.key,
    close: async () => {
      beginShutdown();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await close();
    },
  };
}

async function openBackend(
  o: ServeOptions,
  cfg: ProvisionerConfig,
  state: { dir: string; id: string; secret: Buffer },
  log: Logger,
): Promise<{
  backend: Exclude<ServeBackend, "auto">;
  store: SandboxBackend;
  close: () => Promise<void>;
}> {
  const wanted = o.backend ?? "auto";
  if (wanted === "kubernetes") {
    const store = new SandboxStore(
      new Kube(loadKubeConfig(o.kubeconfig ?? cfg.kubeconfig), { fieldManager: "sandpit-serve" }),
      cfg.namespace,
      log,
      cfg.activityIntervalMs,
      cfg.bounds,
    );
    return { backend: "kubernetes", store, close: () => Promise.resolve(store.stop()) };
  }
  if (cfg.defaultPool)
    throw new Error(
      `SANDPIT_DEFAULT_POOL names a SandboxPool, and the ${wanted} backend has none: unset it (or use --backend kubernetes)`,
    );
  let provider: SandboxProvider | undefined;
  let backend: "docker" | "local" = "local";
  if (wanted !== "local") {
    const docker = new DockerProvider(
      {
        warm: o.warm ?? 1,
        // serve pauses idle sandboxes itself (it knows their traffic): no second reaper.
        idleTimeoutMs: 0,
        ...(o.image ? { image: o.image } : {}),
      },
      log.child({ provider: "docker" }),
    );
    try {
      await docker.runtime();
      provider = docker;
      backend = "docker";
      void docker.fillWarmPool();
    } catch (err) {
      if (wanted === "docker") throw err;
      log.info({ err }, "no container engine answers: using the local backend");
    }
  }
  let support: ServeSupport;
  if (provider) {
    // Docker limits cpu and memory (cgroups) and runs a container without a network.
    support = { backend, cpu: true, memory: true, disk: false, networkDeny: true };
  } else {
    const local = new LocalProvider(
      { baseDir: join(state.dir, "sandboxes") },
      log.child({ provider: "local" }),
    );
    // Host processes: no limits; a private network namespace only inside bubblewrap.
    const bwrap = (await local.isolationMode()) === "bwrap";
    support = { backend, cpu: false, memory: false, disk: false, networkDeny: bwrap };
    provider = local;
  }
  const store = new ProviderStore({
    provider,
    support,
    serveId: state.id,
    log,
    idleTimeoutMs: o.idleTimeoutMs ?? DEFAULT_IDLE_MS,
    bounds: cfg.bounds,
    // Often enough that a sandbox is paused within a few seconds of its idle timeout.
    reapIntervalMs:
      o.reapIntervalMs ?? Math.min(5_000, Math.max(500, (o.idleTimeoutMs ?? DEFAULT_IDLE_MS) / 4)),
  });
  return { backend, store, close: () => store.close() };
}

const USAGE = `Usage: sandpit serve [options]

The provisioner's APIs (native, DeerFlow- and E2B-compatible) on one port, on Docker or local
sandboxes.

  --backend <b>       auto (Docker if an engine answers, else local), docker, local, kubernetes
  --host <addr>       listen address (default 127.0.0.1)
  --port <n>          listen port (default 8080; 0 picks a free one)
  --state-dir <dir>   keys, secret and local sandboxes (default ~/.local/state/sandpit/serve)
  --warm <n>          docker: blank containers kept ready (default 1)
  --image <ref>       docker: the sandbox image (default sandpit-sandbox:latest)
  --idle-timeout <s>  pause sandboxes idle this many seconds (default 900; 0: never)
  --kubeconfig <p>    kubernetes: the cluster (its Sandpit operator runs the sandboxes)
  --namespace <ns>    kubernetes: where sandboxes live (default sandpit-sandboxes)
  --no-first-sandbox  do not make (or find again) the first sandbox at start

Once serving, it makes a first sandbox with the first key (thread "first-sandbox", a TTL of an
hour; a restart finds it again), runs a line of Python and of TypeScript in it and prints how to
reach it.

API keys: SANDPIT_API_KEYS (JSON list of {key, tenant, maxSandboxes}) or SANDPIT_API_KEYS_FILE;
without either, a key is generated into the state directory and printed.
The E2B API's token secret is SANDPIT_E2B_TOKEN_SECRET, else one kept in the state directory.
Prints SANDPIT_URL=..., SANDPIT_E2B_URL=... (and SANDPIT_API_KEY=...) on stdout once serving,
then SANDPIT_SANDBOX_ID=... once the first sandbox ran; logs go to stderr.`;

/** The command line form: parses `argv`, serves until SIGTERM or SIGINT. */
export async function serveCli(argv: string[]): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        backend: { type: "string" },
        host: { type: "string" },
        port: { type: "string" },
        "state-dir": { type: "string" },
        warm: { type: "string" },
        image: { type: "string" },
        "idle-timeout": { type: "string" },
        kubeconfig: { type: "string" },
        namespace: { type: "string" },
        "no-first-sandbox": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    fail(`${(err as Error).message}\n\n${USAGE}`);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const int = (name: string, raw: string | undefined, max: number): number | undefined => {
    if (raw === undefined) return undefined;
    if (!/^\d+$/.test(raw) || Number(raw) > max)
      fail(`--${name}: expected a whole number from 0 to ${max}, not "${raw}"`);
    return Number(raw);
  };
  const backend = values.backend ?? "auto";
  if (!["auto", "docker", "local", "kubernetes"].includes(backend))
    fail(`--backend: one of auto, docker, local, kubernetes; not "${backend}"`);
  const idleS = int("idle-timeout", values["idle-timeout"], 30 * 24 * 3600);
  const opts: ServeOptions = {
    backend: backend as ServeBackend,
    ...defined({
      host: values.host,
      port: int("port", values.port, 65535),
      stateDir: values["state-dir"],
      warm: int("warm", values.warm, 100),
      image: values.image,
      idleTimeoutMs: idleS === undefined ? undefined : idleS * 1000,
      kubeconfig: values.kubeconfig,
      namespace: values.namespace,
    }),
  };
  let serving: Serving;
  try {
    serving = await startServe(opts);
  } catch (err) {
    fail((err as Error).message);
  }
  process.stderr.write(
    `sandpit serve: ${serving.url} (${serving.backend} backend, state in ${serving.stateDir})\n` +
      `  native API: ${serving.url}/v1/sandboxes (Authorization: Bearer <key>)\n` +
      `  DeerFlow provisioner_url: ${serving.url} (X-API-Key: <key>)\n` +
      `  E2B SDKs: E2B_API_URL=${serving.e2bUrl} E2B_SANDBOX_URL=${serving.e2bUrl} E2B_API_KEY=<key>\n`,
  );
  process.stdout.write(
    `SANDPIT_URL=${serving.url}\n` +
      `SANDPIT_E2B_URL=${serving.e2bUrl}\n` +
      (serving.generatedKey ? `SANDPIT_API_KEY=${serving.generatedKey}\n` : ""),
  );
  // Returns once serving has stopped, not before: `sandpit serve` (cli/) exits when it returns.
  const stopped = new Promise<void>((resolve) => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      process.once(signal, () => {
        setTimeout(() => process.exit(0), 20_000).unref();
        void serving.close().finally(resolve);
      });
    }
  });
  if (!values["no-first-sandbox"]) {
    // serve is up either way: a first sandbox that cannot start is reported, not fatal.
    try {
      const first = await firstSandbox(serving.url, serving.apiKey);
      const keyRef = serving.generatedKey ? "$SANDPIT_API_KEY" : "<a key of SANDPIT_API_KEYS>";
      process.stderr.write(describeFirst(first, keyRef));
      process.stdout.write(`SANDPIT_SANDBOX_ID=${first.id}\n`);
    } catch (err) {
      process.stderr.write(
        `sandpit serve: the first sandbox did not run (${(err as Error).message}); serving anyway\n`,
      );
    }
  }
  await stopped;
}

function fail(message: string): never {
  process.stderr.write(`sandpit serve: ${message}\n`);
  process.exit(2);
}

function defined<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

if (import.meta.main) {
  await serveCli(process.argv.slice(2));
  // Timers and sockets a provider may still hold do not keep a stopped serve alive.
  process.exit(0);
}
