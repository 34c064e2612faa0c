/**
 * The one `upgrade` listener of sandboxd's HTTP server: each upgrade route (the TCP tunnel of
 * getHost, a terminal's WebSocket) is matched by path, the bearer token is checked the same way
 * as on every other route, and anything else is answered 404 before any protocol switch. An
 * accepted connection counts as activity (./activity.ts) until it closes.
 */
import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "./log.ts";
import type { TokenGate } from "./token-gate.ts";
import type { Activity } from "./activity.ts";
import { drainingError } from "./wire.ts";

export interface UpgradeRoute {
  path: RegExp;
  /** Called for a request whose path matched and whose token is good. */
  handle(
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    match: RegExpExecArray,
  ): void | Promise<void>;
}

export function attachUpgrades(
  server: Server,
  gate: TokenGate,
  routes: UpgradeRoute[],
  logger: Logger,
  activity: Activity,
): void {
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    for (const route of routes) {
      const match = route.path.exec(path);
      if (!match) continue;
      if (!gate.accepts(req.headers.authorization))
        return refuseUpgrade(socket, 401, "missing or wrong bearer token");
      if (activity.draining) {
        const e = drainingError();
        return refuseUpgrade(socket, 502, e.message, { draining: true });
      }
      // An open terminal or tunnel is activity for as long as its connection lasts.
      socket.once("close", activity.begin());
      const failed = (err: unknown) => {
        logger.error({ err, path }, "upgrade failed");
        refuseUpgrade(socket, 500, "internal error");
      };
      try {
        // A route may load what it needs on first use (pty-routes.ts loads ws): async failures too.
        void Promise.resolve(route.handle(req, socket, head, match)).catch(failed);
      } catch (err) {
        failed(err);
      }
      return;
    }
    refuseUpgrade(socket, 404, "no such upgrade route");
  });
}

/** Answers an upgrade request with an HTTP error in sandboxd's envelope and closes. */
export function refuseUpgrade(
  socket: Duplex,
  status: number,
  message: string,
  extra: { draining?: true } = {},
): void {
  const code =
    status === 401
      ? "UNAUTHORIZED"
      : status === 404
        ? "NOT_FOUND"
        : status === 400
          ? "INVALID_ARGUMENT"
          : status === 500
            ? "INTERNAL"
            : extra.draining
              ? "CONNECTION_FAILED"
              : "EXECUTION_FAILED";
  const body = JSON.stringify({ error: { code, message, ...extra } });
  socket.end(
    `HTTP/1.1 ${status} ${status === 502 ? "Bad Gateway" : "Refused"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
