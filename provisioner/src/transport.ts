/**
 * The one way to a sandbox, for every route that sends it traffic (the native proxy and ports
 * routes, DeerFlow's sandbox_url, WebSocket and TCP upgrades): resume it if it sleeps, wait for
 * it to be Ready, take its token and address, and count every chunk that flows as activity. The
 * bytes themselves are moved by ./proxy.ts.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { Request } from "express";
import { type Destination, type Target, proxyRequest, proxyUpgrade } from "./proxy.ts";
import type { Sandbox } from "./sandboxes.ts";
import type { SandboxBackend } from "./store.ts";

export class Transport {
  readonly #store: SandboxBackend;
  readonly #readyTimeoutMs: number;

  constructor(store: SandboxBackend, readyTimeoutMs: number) {
    this.#store = store;
    this.#readyTimeoutMs = readyTimeoutMs;
  }

  /** A suspended sandbox is resumed by the call that needs it; the call waits for it. */
  async ready(
    s: Sandbox,
    options: { timeoutMs?: number; signal?: AbortSignal | undefined } = {},
  ): Promise<Sandbox> {
    // Even a Ready `s` goes through waitReady: the store knows whether that Ready is from
    // before a suspend or resume this process wrote (a stopping pod's address). A pause not
    // yet in the status is a pause all the same: the call resumes it.
    if (s.status?.phase === "Suspended" || s.spec.lifecycle?.suspended)
      await this.#store.setSuspended(s.metadata.name, false);
    return this.#store.waitReady(
      s.metadata.name,
      options.timeoutMs ?? this.#readyTimeoutMs,
      options.signal,
    );
  }

  /**
   * Forwards an express request's `*rest` path (still percent-encoded) and query, or `path` when
   * given (with its query), to the destination in the sandbox, bodies streamed both ways.
   */
  async forward(
    sandbox: Sandbox,
    req: Request,
    res: ServerResponse,
    to: Destination = { kind: "sandboxd" },
    path?: string,
  ): Promise<void> {
    const { target, onTraffic } = await this.#reach(sandbox, abortedBy(req));
    const q = req.originalUrl.indexOf("?");
    const query = q >= 0 ? req.originalUrl.slice(q) : "";
    await proxyRequest(req, res, target, path ?? `${rawRest(req)}${query}`, to, onTraffic);
  }

  /** Splices an upgrade (WebSocket, `Upgrade: tcp`) through to `path` on the destination. */
  async upgrade(
    sandbox: Sandbox,
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    path: string,
    to: Destination,
  ): Promise<void> {
    const { target, onTraffic } = await this.#reach(sandbox);
    proxyUpgrade(req, socket, head, target, path, to, onTraffic);
  }

  /** The sandbox Ready, its sandboxd's address and token, and the activity its traffic is. */
  async #reach(
    sandbox: Sandbox,
    signal?: AbortSignal,
  ): Promise<{ target: Target; onTraffic: () => void }> {
    const s = await this.ready(sandbox, { signal });
    const onTraffic = () => void this.#store.reportActivity(s.metadata.name);
    onTraffic();
    return {
      target: { ...splitEndpoint(s.status!.endpoint!), token: await this.#store.token(s) },
      onTraffic,
    };
  }
}

/** Aborts when the client's connection closes: nobody is left to wait for. */
export function abortedBy(req: IncomingMessage): AbortSignal {
  const ac = new AbortController();
  req.socket.once("close", () => ac.abort());
  return ac.signal;
}

/** `host:port`, or `unix:<path>` for a sandboxd on a unix socket (the local backend of serve). */
export function splitEndpoint(endpoint: string): {
  host: string;
  port: number;
  socketPath?: string;
} {
  if (endpoint.startsWith("unix:"))
    return { host: "sandboxd", port: 80, socketPath: endpoint.slice("unix:".length) };
  const i = endpoint.lastIndexOf(":");
  return { host: endpoint.slice(0, i), port: Number(endpoint.slice(i + 1)) };
}

/**
 * The path below the route's prefix as the client sent it, still percent-encoded: decoded, `a%2Fb`
 * would become two segments and `%00` a byte no request line may carry. Express decodes each
 * segment of `*rest` on its own, so their number is the number of raw segments to keep.
 */
function rawRest(req: Request): string {
  const segments = ([] as string[]).concat(req.params.rest ?? []).length;
  if (!segments) return "/";
  const path = req.originalUrl.split("?")[0]!;
  return `/${path.split("/").slice(-segments).join("/")}`;
}
