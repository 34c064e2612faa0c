/**
 * TCP tunnels to servers inside the sandbox, for getHost(port): `GET /v1/ports/<port>/tunnel`
 * with `Connection: Upgrade`, `Upgrade: tcp` and the bearer token switches the connection to a
 * raw byte pipe to 127.0.0.1:<port> inside. The SDK listens on a local port and opens one tunnel
 * per connection, so traffic to sandboxed servers never needs the sandbox's own address.
 */
import type { IncomingMessage } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Logger } from "./log.ts";
import { isPort } from "./wire.ts";
import { refuseUpgrade, type UpgradeRoute } from "./upgrades.ts";

export function tunnelRoute(logger: Logger): UpgradeRoute {
  return {
    path: /^\/v1\/ports\/(\d{1,5})\/tunnel$/,
    handle(req: IncomingMessage, socket: Duplex, head: Buffer, match: RegExpExecArray) {
      if (req.headers.upgrade?.toLowerCase() !== "tcp")
        return refuseUpgrade(socket, 404, "no such upgrade route");
      const port = Number(match[1]);
      if (!isPort(port)) return refuseUpgrade(socket, 400, "port must be 1-65535");
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
        if (!switched)
          return refuseUpgrade(socket, 502, `nothing listens on port ${port} in the sandbox`);
        logger.debug({ err, port }, "tunnel closed with an error");
        socket.destroy();
      });
      socket.once("error", () => upstream.destroy());
      socket.once("close", () => upstream.destroy());
      upstream.once("close", () => socket.destroy());
    },
  };
}
