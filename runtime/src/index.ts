/** sandboxd as a library: start it in-process (tests, the local provider's benchmarks) or via main.ts. */
import type { AddressInfo } from "node:net";
import { createServer, type Server } from "node:http";
import type { Logger } from "pino";
import { createApp } from "./server.ts";
import { Executor } from "./executor.ts";
import { PathJail } from "./jail.ts";
import { discoverInterpreters, scrubEnv } from "./environment.ts";
import { VIRTUAL_DIRS } from "./protocol.ts";
import type { Settings } from "./config.ts";

export * from "./protocol.ts";
export { PathJail } from "./jail.ts";
export { readSettings, type Settings } from "./config.ts";
export { scrubEnv, bwrapAvailable } from "./environment.ts";
export { parseOutput } from "./executor.ts";

export interface RunningSandboxd {
  port: number;
  server: Server;
  close(): Promise<void>;
}

export async function startSandboxd(o: {
  settings: Settings;
  token: string;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}): Promise<RunningSandboxd> {
  const jail = await PathJail.open(o.settings.SANDBOXD_ROOT);
  for (const dir of VIRTUAL_DIRS) await jail.mkdir(jail.resolve(`${jail.virtualRoot}/${dir}`));
  const executor = new Executor({
    jail,
    isolation: o.settings.SANDBOXD_ISOLATION,
    network: o.settings.SANDBOXD_NETWORK === "on",
    baseEnv: scrubEnv(o.env),
    outputCapBytes: o.settings.SANDBOXD_OUTPUT_CAP_BYTES,
    interpreters: discoverInterpreters(o.env),
  });
  executor.setSandboxEnv(o.settings.SANDBOXD_ENV);
  const app = createApp({ jail, executor, token: o.token, logger: o.logger });
  const server = createServer(app);
  // Long commands stream for minutes; Node's default request timeout would cut them.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  const [host, port] = splitListen(o.settings.SANDBOXD_LISTEN);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    server,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function splitListen(listen: string): [string, number] {
  const i = listen.lastIndexOf(":");
  return [listen.slice(0, i), Number(listen.slice(i + 1))];
}
