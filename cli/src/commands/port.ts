/**
 * `sandpit port <id> <port>`: the URL at which a server listening on `port` inside the sandbox is
 * reached. With `--forward <local>` it also listens on 127.0.0.1:<local> and carries each
 * connection there, until Ctrl-C.
 */
import { createConnection, createServer, type AddressInfo, type Socket } from "node:net";
import type { Command } from "commander";
import type { SandboxInstance } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { CliError } from "../exit.ts";
import { note, printJson, printLine } from "../output.ts";
import { parsePort } from "../parse.ts";
import { withSandbox } from "../provider.ts";

export function register(program: Command): void {
  program
    .command("port")
    .description("print the URL of a port inside a sandbox, or forward a local port to it")
    .argument("<id>", "sandbox ID")
    .argument("<port>", "port inside the sandbox", parsePort)
    .option(
      "--forward <local>",
      "forward 127.0.0.1:<local> to it until Ctrl-C (0: any free port)",
      (v) => (v === "0" ? 0 : parsePort(v)),
    )
    .action(
      action<[string, number], { forward?: number }>(async ([id, port], o) =>
        withSandbox(o, id, async (sandbox) => {
          if (o.forward === undefined) {
            const url = await sandbox.getUrl(port);
            if (o.json) printJson(url);
            else printLine(url.url);
            return;
          }
          await forward(sandbox, port, o.forward, o.json === true);
        }),
      ),
    );
}

async function forward(sandbox: SandboxInstance, port: number, local: number, json: boolean) {
  const [host, remotePort] = splitHost(await sandbox.getHost(port));
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = createConnection({ host, port: remotePort });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.once("close", () => sockets.delete(s));
      s.once("error", () => (s === client ? upstream : client).destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(new CliError(`cannot listen on 127.0.0.1:${local}: ${err.code ?? err.message}`)),
    );
    server.listen(local, "127.0.0.1", () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${bound}`;
  if (json) printJson({ url, local: bound, port, target: `${host}:${remotePort}` });
  else printLine(url);
  note(
    `sandpit: forwarding 127.0.0.1:${bound} to port ${port} of ${sandbox.sandboxId}; Ctrl-C stops`,
  );
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
}

function splitHost(hostPort: string): [string, number] {
  const i = hostPort.lastIndexOf(":");
  return [hostPort.slice(0, i).replace(/^\[|\]$/g, ""), Number(hostPort.slice(i + 1))];
}
