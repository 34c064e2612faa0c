/**
 * Starting sandboxd: its server, its state, its routes. main.ts (the process) imports this module
 * and not ./index.ts, whose re-export of ./protocol.ts would build every request schema at start
 * (./request-schemas.ts).
 */
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { rm } from "node:fs/promises";
import type { Logger } from "./log.ts";
import { createApp } from "./server.ts";
import { TokenGate } from "./token-gate.ts";
import { tunnelRoute } from "./tunnel.ts";
import { attachUpgrades } from "./upgrades.ts";
import { ptyUpgradeRoute } from "./pty-routes.ts";
import { Terminals } from "./ptys.ts";
import { Executor } from "./executor.ts";
import { PathJail } from "./jail.ts";
import { discoverInterpreters, installShims, scrubEnv } from "./environment.ts";
import { VIRTUAL_DIRS } from "./wire.ts";
import { killStartedSessions } from "./process.ts";
import { ShellSessions } from "./shell-sessions.ts";
import { CodeContexts } from "./contexts.ts";
import { ProcessTable } from "./processes.ts";
import { Activity } from "./activity.ts";
import { IsolationProbe } from "./isolation.ts";
import type { Settings } from "./config.ts";

// Not `import { createServer } from "node:http"`: an ES import of node:http reads every export,
// and its lazy WebSocket getters then load Node's fetch implementation (undici): about a tenth of
// sandboxd's start-up (bench/src/sandboxd-start.ts --profile). The CommonJS-style handle does not.
const { createServer } = process.getBuiltinModule("node:http");

export interface RunningSandboxd {
  /** "127.0.0.1:41234" or "unix:/path/to/socket". */
  address: string;
  /** TCP port, or null on a unix socket. */
  port: number | null;
  server: Server;
  /**
   * Resolves once a drain succeeded and was answered (protocol.ts, DRAIN_PATH): from then on
   * sandboxd refuses all work, and its owner stops it (main.ts exits with DRAINED_EXIT_CODE).
   */
  drained: Promise<void>;
  close(): Promise<void>;
}

export async function startSandboxd(o: {
  settings: Settings;
  /**
   * The token, or its SHA-256 (what a pod is given). Null only with SANDBOXD_AIO_NO_AUTH=1: then
   * native routes accept nothing until /v1/init.
   */
  token: string | { sha256: string } | null;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}): Promise<RunningSandboxd> {
  const jail = await PathJail.open(o.settings.SANDBOXD_ROOT);
  for (const dir of VIRTUAL_DIRS) await jail.mkdir(jail.resolve(`${jail.virtualRoot}/${dir}`));
  const interpreters = discoverInterpreters(o.env);
  const shims = interpreters.then((interp) =>
    installShims(`${jail.realRoot}/.sandpit/bin`, interp),
  );
  const executor = new Executor({
    jail,
    baseEnv: scrubEnv(o.env),
    outputCapBytes: o.settings.SANDBOXD_OUTPUT_CAP_BYTES,
    // Processes start only once the interpreter links are in place.
    interpreters: shims.then(() => interpreters),
  });
  executor.setSandboxEnv(o.settings.SANDBOXD_ENV);
  const gate = new TokenGate(o.token);
  const files =
    o.settings.SANDBOXD_AIO_PATHS === "any" ? await PathJail.open("/", "/", jail.defaultDir) : jail;
  const sessions = new ShellSessions({
    executor,
    jail,
    outputCapBytes: o.settings.SANDBOXD_OUTPUT_CAP_BYTES,
    maxSessions: o.settings.SANDBOXD_AIO_MAX_SESSIONS,
    idleMs: o.settings.SANDBOXD_AIO_SESSION_IDLE_SECONDS * 1000,
  });
  const terminals = new Terminals({
    executor,
    max: o.settings.SANDBOXD_MAX_TERMINALS,
    idleMs: o.settings.SANDBOXD_TERMINAL_IDLE_SECONDS * 1000,
  });
  const contexts = new CodeContexts({
    executor,
    jail,
    outputCapBytes: o.settings.SANDBOXD_OUTPUT_CAP_BYTES,
    maxContexts: o.settings.SANDBOXD_MAX_CONTEXTS,
    idleMs: o.settings.SANDBOXD_CONTEXT_IDLE_SECONDS * 1000,
  });
  const processes = new ProcessTable({
    executor,
    maxProcesses: o.settings.SANDBOXD_MAX_PROCESSES,
    outputBytes: o.settings.SANDBOXD_PROCESS_OUTPUT_BYTES,
    outputTotalBytes: o.settings.SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES,
  });
  const activity = new Activity();
  let onDrained!: () => void;
  const drained = new Promise<void>((resolve) => (onDrained = resolve));
  activity.watch(() => processes.active);
  activity.watch(() => terminals.active);
  activity.watch(() => contexts.active);
  activity.watch(() => sessions.active);
  const probe = o.settings.SANDBOXD_ISOLATION_PROBE;
  const isolation = probe ? new IsolationProbe(probe, o.logger) : undefined;
  isolation?.start();
  const app = createApp({
    jail,
    executor,
    gate,
    logger: o.logger,
    terminals,
    contexts,
    processes,
    activity,
    isolation,
    onDrained,
    aio: { files, sessions, open: o.settings.SANDBOXD_AIO_NO_AUTH === "1" },
  });
  const server = createServer(app.handle);
  // The spare Python interpreter starts once the first request is answered, not beside it.
  server.once("request", (_req, res) => res.once("close", () => executor.prepare()));
  attachUpgrades(
    server,
    gate,
    [tunnelRoute(o.logger), ptyUpgradeRoute(terminals)],
    o.logger,
    activity,
  );
  // Long commands stream for minutes; Node's default request timeout would cut them.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  const listen = o.settings.SANDBOXD_LISTEN;
  const socket = listen.startsWith("unix:") ? listen.slice("unix:".length) : null;
  if (socket) await rm(socket, { force: true }); // a stale socket from a previous run
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (socket) server.listen(socket, () => resolve());
    else {
      const i = listen.lastIndexOf(":");
      server.listen(Number(listen.slice(i + 1)), listen.slice(0, i), () => resolve());
    }
  });
  const port = socket ? null : (server.address() as AddressInfo).port;
  return {
    address: socket ? listen : `${listen.slice(0, listen.lastIndexOf(":"))}:${port}`,
    port,
    server,
    drained,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await sessions.shutdown();
      await terminals.shutdown();
      await contexts.shutdown();
      processes.shutdown();
      executor.close();
      activity.stop();
      isolation?.stop();
      await killStartedSessions();
    },
  };
}
