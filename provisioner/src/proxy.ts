/**
 * Forwarding to a sandbox, streamed both ways: request and response bodies are piped, never
 * buffered, so a 1 GiB download costs the provisioner a few buffers; an upgrade (WebSocket, or
 * sandboxd's TCP tunnel for getHost) becomes a spliced pair of sockets.
 *
 * Two destinations: sandboxd itself, where the client's credential (an API key or a capability)
 * is replaced by the sandbox's own bearer token; and a server listening on a port inside the
 * sandbox, reached through sandboxd's TCP tunnel (`/v1/ports/<port>/tunnel`), which never sees
 * either credential.
 *
 * A client that goes away mid-upload makes the upstream request abort too, so sandboxd sees a
 * cut-off body and discards the partial file instead of completing it.
 *
 * This module only moves bytes to a target it is given; getting that target (a Ready sandbox,
 * its address and token) is ./transport.ts's part.
 */
import {
  Agent,
  type IncomingMessage,
  type ServerResponse,
  request as httpRequest,
} from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { ApiError, endSocket, writeError } from "./api/errors.ts";

/** A sandbox's sandboxd: its address and bearer token. */
export interface Target {
  host: string;
  port: number;
  /** sandboxd listens on this unix socket instead (host and port then only fill Host). */
  socketPath?: string | undefined;
  token: string;
}

/** A connection to the target's sandboxd, over TCP or its unix socket. */
const connectTo = (target: Target): Socket =>
  target.socketPath ? connect(target.socketPath) : connect(target.port, target.host);

/**
 * Keep-alive connections to sandboxds, one pool per address (host and port, or unix socket):
 * a sandbox's requests after its first reuse an open connection, as a direct client's do.
 */
const sandboxdAgent = new Agent({ keepAlive: true, keepAliveMsecs: 30_000 });

/**
 * Opens a pooled connection to a sandbox's sandboxd ahead of its first proxied request (a
 * `GET /healthz`, answered and drained): called when the sandbox becomes Ready, so the create's
 * caller does not pay the connect on its first command. Best effort: a failure is the first
 * request's to report.
 */
export function preconnect(target: Target): void {
  const req = httpRequest({
    agent: sandboxdAgent,
    method: "GET",
    path: "/healthz",
    headers: { host: `${target.host}:${target.port}`, authorization: `Bearer ${target.token}` },
    ...(target.socketPath
      ? { socketPath: target.socketPath }
      : { host: target.host, port: target.port }),
    timeout: 10_000,
  });
  req.on("response", (res) => res.resume());
  req.on("timeout", () => req.destroy());
  req.on("error", () => undefined);
  req.end();
}

/** Where a request goes: sandboxd itself, or port `port` inside the sandbox (a tunnel). */
export type Destination = { kind: "sandboxd" } | { kind: "port"; port: number };

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the provisioner's own credentials are not forwarded. */
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "host",
  "authorization",
  "x-api-key",
];
/** sandboxd gets no cookies; a server of the user's inside the sandbox gets its own. */
const DROP = {
  sandboxd: new Set([...HOP_BY_HOP, "cookie"]),
  port: new Set(HOP_BY_HOP),
};

function forwardHeaders(
  req: IncomingMessage,
  target: Target,
  to: Destination,
): Record<string, string | string[]> {
  const drop = DROP[to.kind];
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !drop.has(k)) out[k] = v;
  if (to.kind === "sandboxd") {
    out.host = `${target.host}:${target.port}`;
    out.authorization = `Bearer ${target.token}`;
  } else {
    out.host = `127.0.0.1:${to.port}`;
  }
  return out;
}

/** Why the destination could not be reached, with the status to answer (502 unless said). */
const unreachable = (message: string, status?: number) =>
  new ApiError("UPSTREAM_UNAVAILABLE", message, { status });

/**
 * A raw connection to 127.0.0.1:`port` inside the sandbox: sandboxd's tunnel, opened with the
 * sandbox's token. Rejects with sandboxd's own answer when it refuses (nothing listens there,
 * say).
 */
function openTunnel(target: Target, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connectTo(target);
    let buffered = Buffer.alloc(0);
    const fail = (err: Error) => {
      socket.destroy();
      reject(err);
    };
    socket.setTimeout(30_000, () => fail(unreachable("sandboxd did not open the tunnel", 504)));
    socket.once("connect", () => {
      socket.write(
        `GET /v1/ports/${port}/tunnel HTTP/1.1\r\nhost: ${target.host}:${target.port}\r\n` +
          `authorization: Bearer ${target.token}\r\nconnection: Upgrade\r\nupgrade: tcp\r\n\r\n`,
      );
    });
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf("\r\n\r\n");
      if (end < 0) {
        if (buffered.length > 16_384) fail(unreachable("sandboxd's answer is too long"));
        return;
      }
      socket.off("data", onData);
      socket.setTimeout(0);
      const head = buffered.subarray(0, end).toString("latin1");
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
      if (status === 101) {
        const rest = buffered.subarray(end + 4);
        if (rest.length) socket.unshift(rest);
        return resolve(socket);
      }
      const body = buffered.subarray(end + 4).toString();
      const message =
        /"message"\s*:\s*"([^"]*)"/.exec(body)?.[1] ?? `sandboxd answered HTTP ${status}`;
      // sandboxd's refusals of the request itself keep their status; anything else is a 502.
      fail(unreachable(message, status >= 400 && status < 500 ? status : undefined));
    };
    socket.on("data", onData);
    socket.once("error", (err) => fail(unreachable(`sandboxd did not answer: ${err.message}`)));
  });
}

/**
 * Forwards one HTTP request to `path` (with its query) on the destination. `onTraffic` is called
 * on every chunk either way: a long stream is activity for as long as it flows.
 */
export function proxyRequest(
  req: IncomingMessage,
  res: ServerResponse,
  target: Target,
  path: string,
  to: Destination,
  onTraffic: () => void,
): Promise<void> {
  return new Promise((resolve) => {
    const upstream = httpRequest({
      method: req.method,
      path,
      headers: forwardHeaders(req, target, to),
      ...(to.kind === "sandboxd"
        ? {
            agent: sandboxdAgent,
            ...(target.socketPath
              ? { socketPath: target.socketPath }
              : { host: target.host, port: target.port }),
          }
        : {
            // The request goes over a tunnel opened first; Node waits for `done`.
            createConnection: (_o: unknown, done: (err: Error | null, s: Duplex) => void) => {
              openTunnel(target, to.port).then(
                (s) => done(null, s),
                (err: Error) => done(err, undefined as unknown as Duplex),
              );
              return undefined;
            },
          }),
    });
    const fail = (err: ApiError) => {
      writeError(res, err);
      resolve();
    };
    upstream.on("response", (up) => {
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers))
        if (v !== undefined && k !== "connection" && k !== "keep-alive") headers[k] = v;
      res.writeHead(up.statusCode ?? 502, headers);
      // Forward the status now: a stream that answers before its first byte (a file watch is
      // active once its headers arrive) must not wait for that byte.
      res.flushHeaders();
      up.on("data", onTraffic);
      up.pipe(res);
      up.on("end", () => resolve());
      up.on("error", () => {
        res.destroy();
        resolve();
      });
    });
    upstream.on("error", (err) =>
      fail(
        err instanceof ApiError
          ? err
          : unreachable(
              `${to.kind === "sandboxd" ? "sandboxd" : `port ${to.port}`} did not answer: ${err.message}`,
            ),
      ),
    );
    // The client hung up: abort upstream too (an interrupted upload must not look complete).
    res.on("close", () => {
      if (!res.writableFinished) upstream.destroy(new Error("client closed the connection"));
    });
    req.on("aborted", () => upstream.destroy(new Error("client aborted")));
    req.on("data", onTraffic);
    req.pipe(upstream);
  });
}

/**
 * Forwards an upgrade request (WebSocket, `Upgrade: tcp`) and splices the two sockets once the
 * destination agrees. Whatever it answers (101 or an error) goes back to the client verbatim.
 * `onTraffic` is called on every chunk either way, for as long as the connection lives.
 */
export function proxyUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: Target,
  path: string,
  to: Destination,
  onTraffic: () => void,
): void {
  const headers = forwardHeaders(req, target, to);
  headers.connection = "Upgrade";
  if (req.headers.upgrade) headers.upgrade = req.headers.upgrade;
  const lines = [`${req.method ?? "GET"} ${path} HTTP/1.1`];
  for (const [k, v] of Object.entries(headers))
    for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
  let upstream: Duplex | undefined;
  const close = () => {
    upstream?.destroy();
    client.destroy();
  };
  const splice = (socket: Duplex) => {
    upstream = socket;
    socket.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (head.length) socket.write(head);
    socket.on("data", onTraffic);
    client.on("data", onTraffic);
    socket.pipe(client);
    client.pipe(socket);
    socket.on("error", close);
    socket.on("close", () => client.destroy());
    client.on("close", () => socket.destroy());
  };
  client.on("error", close);
  if (to.kind === "port") {
    openTunnel(target, to.port).then(splice, (err: ApiError) =>
      client.writable ? endSocket(client, err) : close(),
    );
    return;
  }
  const socket = connectTo(target);
  socket.once("connect", () => splice(socket));
  socket.once("error", (err) => {
    if (client.writable && !socket.bytesRead)
      endSocket(client, unreachable(`sandboxd did not answer: ${err.message}`));
    else close();
  });
}
