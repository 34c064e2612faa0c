/**
 * TCP tunnels to servers inside the sandbox, for getHost(port): `GET /v1/ports/<port>/tunnel`
 * with `Connection: Upgrade`, `Upgrade: tcp` and the bearer token switches the connection to a
 * raw byte pipe to 127.0.0.1:<port> inside. The SDK listens on a local port and opens one tunnel
 * per connection, so traffic to sandboxed servers never needs the sandbox's own address.
 */
import type { IncomingMessage, Server } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { isPort } from "./protocol.ts";
import type { TokenGate } from "./token-gate.ts";

const ROUTE = /^\/v1\/ports\/(\d{1,5})\/tunnel$/;

export function attachTunnel(server: Server, gate: TokenGate, logger: Logger): void {
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const match = ROUTE.exec(new URL(req.url ?? "/", "http://x").pathname);
    const port = Number(match?.[1]);
    if (!match || req.headers.upgrade?.toLowerCase() !== "tcp")
      return refuse(socket, 404, "no such upgrade route");
    if (!gate.accepts(req.headers.authorization))
      return refuse(socket, 401, "missing or wrong bearer token");
    if (!isPort(port)) return refuse(socket, 400, "port must be 1-65535");
    const upstream: Socket = connect(port, "127.0.0.1");
    let switched = false;
    upstream.once("connect", () => {
      switched = true;
      socket.write(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
      );
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.once("error", (err) => {
      if (!switched) return refuse(socket, 502, `nothing listens on port ${port} in the sandbox`);
      logger.debug({ err, port }, "tunnel closed with an error");
      socket.destroy();
    });
    socket.once("error", () => upstream.destroy());
    socket.once("close", () => upstream.destroy());
    upstream.once("close", () => socket.destroy());
  });
}

function refuse(socket: Duplex, status: number, message: string): void {
  const body = JSON.stringify({
    error: {
      code:
        status === 401
          ? "UNAUTHORIZED"
          : status === 404
            ? "NOT_FOUND"
            : status === 400
              ? "INVALID_ARGUMENT"
              : "EXECUTION_FAILED",
      message,
    },
  });
  socket.end(
    `HTTP/1.1 ${status} ${status === 502 ? "Bad Gateway" : "Refused"}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
