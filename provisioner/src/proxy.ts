/**
 * Forwarding to sandboxd, streamed both ways: request and response bodies are piped, never
 * buffered, so a 1 GiB download costs the provisioner a few buffers; an upgrade (WebSocket, or
 * sandboxd's TCP tunnel for getHost) becomes a spliced pair of sockets. The client's credential
 * (an API key or a capability) is replaced by the sandbox's own bearer token on the way.
 *
 * A client that goes away mid-upload makes the upstream request abort too, so sandboxd sees a
 * cut-off body and discards the partial file instead of completing it.
 */
import { type IncomingMessage, type ServerResponse, request as httpRequest } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";

export interface Target {
  host: string;
  port: number;
  token: string;
}

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the client's own credentials are not forwarded. */
const DROP = new Set([
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
  "cookie",
]);

function forwardHeaders(req: IncomingMessage, target: Target): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !DROP.has(k)) out[k] = v;
  out.host = `${target.host}:${target.port}`;
  out.authorization = `Bearer ${target.token}`;
  return out;
}

export function splitEndpoint(endpoint: string): { host: string; port: number } {
  const i = endpoint.lastIndexOf(":");
  return { host: endpoint.slice(0, i), port: Number(endpoint.slice(i + 1)) };
}

/** Forwards one HTTP request to `path` (with its query) on sandboxd. */
export function proxyRequest(
  req: IncomingMessage,
  res: ServerResponse,
  target: Target,
  path: string,
): Promise<void> {
  return new Promise((resolve) => {
    const upstream = httpRequest({
      host: target.host,
      port: target.port,
      method: req.method,
      path,
      headers: forwardHeaders(req, target),
    });
    const fail = (status: number, message: string) => {
      if (!res.headersSent) {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "UPSTREAM_UNAVAILABLE", message } }));
      } else {
        res.destroy();
      }
      resolve();
    };
    upstream.on("response", (up) => {
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers))
        if (v !== undefined && k !== "connection" && k !== "keep-alive") headers[k] = v;
      res.writeHead(up.statusCode ?? 502, headers);
      up.pipe(res);
      up.on("end", () => resolve());
      up.on("error", () => {
        res.destroy();
        resolve();
      });
    });
    upstream.on("error", (err) => fail(502, `sandboxd did not answer: ${err.message}`));
    // The client hung up: abort upstream too (an interrupted upload must not look complete).
    res.on("close", () => {
      if (!res.writableFinished) upstream.destroy(new Error("client closed the connection"));
    });
    req.on("aborted", () => upstream.destroy(new Error("client aborted")));
    req.pipe(upstream);
  });
}

/**
 * Forwards an upgrade request (WebSocket, `Upgrade: tcp`) and splices the two sockets once
 * sandboxd agrees. Whatever sandboxd answers (101 or an error) goes back to the client verbatim.
 */
export function proxyUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: Target,
  path: string,
): void {
  const upstream: Socket = connect(target.port, target.host);
  const headers = forwardHeaders(req, target);
  headers.connection = "Upgrade";
  if (req.headers.upgrade) headers.upgrade = req.headers.upgrade;
  const lines = [`${req.method ?? "GET"} ${path} HTTP/1.1`];
  for (const [k, v] of Object.entries(headers))
    for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
  upstream.once("connect", () => {
    upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
  const close = () => {
    upstream.destroy();
    client.destroy();
  };
  upstream.on("error", () => {
    if (client.writable && !upstream.bytesRead) {
      client.end("HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    } else close();
  });
  client.on("error", close);
  upstream.on("close", () => client.destroy());
  client.on("close", () => upstream.destroy());
}
