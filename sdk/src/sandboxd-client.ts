/**
 * Typed client for sandboxd's native API: the one data plane of the local, docker and
 * kubernetes providers. It owns the wire details (JSON, NDJSON streaming, raw file bodies) and
 * maps every failure onto SandboxError, so providers only decide where sandboxd lives.
 */
import type {
  CodeExecutionResult,
  CommandExit,
  CommandStreamEvent,
  DrainResponse,
  ErrorBody,
  ExecuteCodeRequest,
  FileEntry,
  HealthResponse,
  InitRequest,
  InstallPackagesRequest,
  RunCommandRequest,
  RunCommandResult,
} from "@sandpit/sandboxd/protocol";
import type { Agent, IncomingMessage } from "node:http";
import { Readable, type Duplex } from "node:stream";
// Types only: undici is imported for the first WebSocket (a terminal), the one thing node:http
// cannot open; its hundred modules would otherwise be most of a short-lived process's start-up.
import type { Agent as UndiciAgent, WebSocket } from "undici";
import { SandboxError, sandboxErrorCode } from "./errors.ts";
import { codeForAnswer, errorEnvelope } from "./http-errors.ts";

// node:http as its CommonJS object: an ESM import of node:http reads every export, WebSocket's
// lazy getter included, which loads Node's bundled undici (about 20 ms of a `sandpit exec`'s
// start) that this client never uses. node:https is taken only by a client of an https address
// (the constructor): loading it (tls and its secure context) costs a fresh process ~11 ms.
const plainHttp = process.getBuiltinModule("node:http");
const httpRequest = plainHttp.request;

/** How to reach a sandboxd directly: its address and its bearer token (./sandboxd-connection.ts). */
export interface SandboxdConnection {
  /** e.g. http://127.0.0.1:28080; with `socketPath`, only the scheme and path prefix count. */
  baseUrl: string;
  /** The unix socket sandboxd listens on (the local provider; Docker without a network). */
  socketPath?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  token: string;
}

export interface SandboxdClientOptions {
  /** e.g. http://127.0.0.1:41234, or a proxy prefix such as https://host/v1/sandboxes/x/proxy */
  baseUrl: string;
  /** Connect over this unix socket instead (baseUrl then only supplies the path prefix). */
  socketPath?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  token: string;
  /** Extra headers on every request (a provisioner API key, say). */
  headers?: Record<string, string>;
  /** Deadline of calls that do not run user code (files, health). */
  requestTimeoutMs?: number;
}

/** A streamed command still needs this long beyond its own timeout for the final line. */
const GRACE_MS = 15_000;

/** The pool's inactivity limit of a request that sets no deadline of its own (`timeoutMs` unset). */
const IDLE_TIMEOUT_MS = 300_000;

export type HttpMethod = "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE";

/**
 * A response whose status was OK; its body is still to be read, once: as JSON, text or bytes,
 * chunk by chunk (async iteration), or dropped (dump, destroy).
 */
export class Body implements AsyncIterable<Uint8Array> {
  readonly #res: IncomingMessage;

  constructor(res: IncomingMessage) {
    this.#res = res;
  }

  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    return this.#res[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>;
  }

  async #bytes(): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.#res) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async text(): Promise<string> {
    return (await this.#bytes()).toString("utf8");
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const b = await this.#bytes();
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
  }

  /** Reads the rest and drops it, so the connection goes back to the pool. */
  async dump(): Promise<void> {
    for await (const _ of this.#res);
  }

  /** Stops reading: the connection is closed (sandboxd sees the client go). */
  destroy(err?: Error): void {
    this.#res.destroy(err);
  }
}

export interface RequestOptions {
  /** A stream is sent as it is read (chunked), never gathered first. */
  body?: string | Uint8Array | Readable;
  headers?: Record<string, string>;
  /**
   * A deadline for the whole request. Without one only the pool's inactivity timeouts apply;
   * `null` lifts those too (an attach to a process that may stay silent for longer).
   */
  timeoutMs?: number | null | undefined;
  signal?: AbortSignal;
}

export class SandboxdClient {
  private readonly base: string;
  /** scheme://host[:port] and the path prefix (a provisioner proxy route, say) of `base`. */
  private readonly origin: string;
  private readonly prefix: string;
  private readonly socketPath: string | undefined;
  private readonly headers: Record<string, string>;
  private readonly requestTimeoutMs: number;
  /** One keep-alive connection pool per sandbox. */
  private readonly agent: Agent;
  private readonly request: typeof httpRequest;
  /** `{ servername: "" }` on plain HTTP (see the constructor), nothing over TLS. */
  private readonly servername: { servername?: string };
  /** undici's pool, for WebSockets only, made with the first one. */
  private wsPool: Promise<UndiciAgent> | undefined;
  /** Requests not yet finished, which close() waits for. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Where this client connects, and with which token (see ./sandboxd-connection.ts). */
  connection: SandboxdConnection;

  constructor(opts: SandboxdClientOptions) {
    this.base = opts.baseUrl.replace(/\/+$/, "");
    const url = new URL(this.base);
    this.origin = url.origin;
    this.prefix = url.pathname.replace(/\/+$/, "");
    this.socketPath = opts.socketPath;
    this.headers = { ...opts.headers, authorization: `Bearer ${opts.token}` };
    this.connection = {
      baseUrl: this.base,
      ...(opts.socketPath ? { socketPath: opts.socketPath } : {}),
      token: opts.token,
    };
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    const tls = url.protocol === "https:";
    // Idle pooled sockets are unref'd by the agent: they never keep a process alive.
    const { Agent, request } = tls ? process.getBuiltinModule("node:https") : plainHttp;
    this.agent = new Agent({ keepAlive: true, keepAliveMsecs: 30_000 });
    this.request = request;
    // Over plain HTTP there is no TLS server name; left unset, Node's agent works one out for
    // every request by testing the host with isIP(), whose IPv6 regular expression V8 compiles
    // on first use: ~5 ms of a short-lived process's first request, for a name never used.
    this.servername = tls ? {} : { servername: "" };
  }

  /** undici's pool for WebSockets, over the same socket. */
  private wsDispatcher(): Promise<UndiciAgent> {
    this.wsPool ??= import("undici").then(
      ({ Agent }) =>
        new Agent({
          keepAliveTimeout: 30_000,
          ...(this.socketPath ? { connect: { socketPath: this.socketPath } } : {}),
        }),
    );
    return this.wsPool;
  }

  /** Waits for requests under way to finish, then closes the pooled connections. */
  async close(): Promise<void> {
    await Promise.all(this.inFlight);
    this.agent.destroy();
    if (this.wsPool) await (await this.wsPool).close();
  }

  /**
   * Drops every connection at once, streams still open included (a background process's
   * output, a watch): letting go of a sandboxd that keeps running without this process.
   */
  async destroy(): Promise<void> {
    this.agent.destroy();
    if (this.wsPool) await (await this.wsPool).destroy();
  }

  health(timeoutMs = 5_000): Promise<HealthResponse> {
    return this.json("GET", "/healthz", undefined, timeoutMs);
  }

  /**
   * Runs a command to completion. With `onChunk`, output is streamed (NDJSON) as it arrives and
   * the result's stdout/stderr are assembled from the same chunks.
   */
  async runCommand(
    req: RunCommandRequest,
    onChunk?: (stream: "stdout" | "stderr", data: string) => void,
    signal?: AbortSignal,
  ): Promise<RunCommandResult> {
    const deadline = (req.timeoutMs ?? 5 * 60_000) + GRACE_MS;
    if (!onChunk) return this.json("POST", "/v1/commands/run", req, deadline, signal);
    const res = await this.send("POST", "/v1/commands/run", {
      body: JSON.stringify(req),
      headers: { "content-type": "application/json", accept: "application/x-ndjson" },
      timeoutMs: deadline,
      signal,
    });
    const out = { stdout: "", stderr: "" };
    let exit: CommandExit | undefined;
    try {
      for await (const event of ndjson<CommandStreamEvent>(res)) {
        switch (event.stream) {
          case "stdout":
          case "stderr":
            out[event.stream] += event.data;
            onChunk(event.stream, event.data);
            break;
          case "error":
            throw fromBody(event.error);
          case "exit":
            exit = event;
        }
      }
    } catch (err) {
      throw failure(err, "reading the command's output stream", signal);
    }
    if (!exit)
      throw new SandboxError(
        "the command's output stream ended without an exit status",
        "CONNECTION_FAILED",
      );
    const { stream: _s, ...status } = exit;
    return { ...status, ...out };
  }

  /** Aborting `signal` ends the request, which makes sandboxd kill the code's process group. */
  async executeCode(req: ExecuteCodeRequest, signal?: AbortSignal): Promise<CodeExecutionResult> {
    const res = await this.send("POST", "/v1/code/execute", {
      body: JSON.stringify(req),
      headers: { "content-type": "application/json" },
      timeoutMs: (req.timeoutMs ?? 5 * 60_000) + GRACE_MS,
      signal,
    });
    try {
      return (await res.json()) as CodeExecutionResult;
    } catch (err) {
      throw asSandboxError(err, "POST /v1/code/execute");
    }
  }

  async installPackages(req: InstallPackagesRequest): Promise<void> {
    await this.json("POST", "/v1/packages/install", req, (req.timeoutMs ?? 10 * 60_000) + GRACE_MS);
  }

  /** `timeoutMs` bounds the whole call; the default leaves room for installing packages. */
  async init(req: InitRequest, timeoutMs = 10 * 60_000): Promise<void> {
    await this.json("POST", "/v1/init", req, timeoutMs);
    // The token this client had opens nothing now: it carries on, connections and all, with
    // the one it set (a warm claim's first command reuses the connection that warmed it up).
    this.headers.authorization = `Bearer ${req.token}`;
    this.connection = { ...this.connection, token: req.token };
  }

  /**
   * Asks sandboxd to stop itself if nothing runs and nothing has for `idleMs` (the check and
   * the stop are sandboxd's, atomic: @sandpit/sandboxd/protocol, DRAIN_PATH).
   */
  drain(idleMs: number, timeoutMs = 5_000): Promise<DrainResponse> {
    return this.json("POST", "/v1/drain", { idleMs }, timeoutMs);
  }

  /**
   * A raw TCP stream to 127.0.0.1:<port> inside the sandbox (sandboxd's /v1/ports tunnel).
   * Uses node:http directly: fetch cannot take over a connection after an upgrade.
   */
  openTunnel(port: number, timeoutMs = 10_000): Promise<Duplex> {
    const url = new URL(`${this.origin}${this.prefix}/v1/ports/${port}/tunnel`);
    return new Promise((resolve, reject) => {
      const req = httpRequest({
        ...(this.socketPath
          ? { socketPath: this.socketPath }
          : { host: url.hostname, port: url.port || 80 }),
        path: url.pathname,
        method: "GET",
        headers: { ...this.headers, connection: "Upgrade", upgrade: "tcp" },
        timeout: timeoutMs,
      });
      req.once("upgrade", (_res, socket, head) => {
        if (head.length) socket.unshift(head);
        resolve(socket);
      });
      req.once("response", (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => {
          const e = errorEnvelope(body);
          reject(
            e
              ? fromBody(e)
              : new SandboxError(
                  `port tunnel refused with HTTP ${res.statusCode}`,
                  codeForAnswer(res.statusCode ?? 500),
                ),
          );
        });
      });
      req.once("timeout", () =>
        req.destroy(new SandboxError(`opening a tunnel to port ${port} timed out`, "TIMEOUT")),
      );
      req.once("error", (err) => reject(asSandboxError(err, `tunnel to port ${port}`)));
      req.end();
    });
  }

  /**
   * `request` for a route that answers JSON (sdk/src/sandboxd/): a JSON body, or raw bytes; the
   * answer's JSON, or undefined for an empty one (204).
   */
  async call<T>(
    method: HttpMethod,
    path: string,
    body?: unknown,
    timeoutMs = this.requestTimeoutMs,
  ): Promise<T> {
    const raw = body instanceof Uint8Array;
    const res = await this.send(method, path, {
      ...(body === undefined ? {} : { body: raw ? body : JSON.stringify(body) }),
      headers:
        body === undefined
          ? {}
          : { "content-type": raw ? "application/octet-stream" : "application/json" },
      timeoutMs,
    });
    try {
      const text = await res.text();
      return (text ? JSON.parse(text) : undefined) as T;
    } catch (err) {
      throw asSandboxError(err, `${method} ${path}`);
    }
  }

  /**
   * A WebSocket to `path` on sandboxd, over the same connection settings and with the same
   * headers as every call (undici's WebSocket takes headers, which the WHATWG one cannot).
   */
  async webSocket(path: string): Promise<WebSocket> {
    const url = `${this.origin.replace(/^http/, "ws")}${this.prefix}${path}`;
    const [{ WebSocket }, dispatcher] = await Promise.all([import("undici"), this.wsDispatcher()]);
    return new WebSocket(url, { dispatcher, headers: this.headers });
  }

  async readFile(path: string, signal?: AbortSignal): Promise<Uint8Array> {
    const res = await this.send("GET", `/v1/files?path=${encodeURIComponent(path)}`, {
      timeoutMs: this.requestTimeoutMs,
      ...(signal ? { signal } : {}),
    });
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      throw asSandboxError(err, `reading ${path}`);
    }
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    signal?: AbortSignal,
  ): Promise<{ path: string; size: number }> {
    const res = await this.send("PUT", `/v1/files?path=${encodeURIComponent(path)}`, {
      body: content,
      headers: { "content-type": "application/octet-stream" },
      timeoutMs: this.requestTimeoutMs,
      ...(signal ? { signal } : {}),
    });
    return (await res.json()) as { path: string; size: number };
  }

  stat(path: string): Promise<FileEntry> {
    return this.json("GET", `/v1/files/stat?path=${encodeURIComponent(path)}`);
  }

  list(path: string, depth = 1): Promise<{ entries: FileEntry[]; truncated: boolean }> {
    return this.json("GET", `/v1/files/list?path=${encodeURIComponent(path)}&depth=${depth}`);
  }

  async mkdir(path: string): Promise<void> {
    await this.json("POST", "/v1/files/mkdir", { path });
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    const res = await this.send(
      "DELETE",
      `/v1/files?path=${encodeURIComponent(path)}&recursive=${recursive}`,
      {
        timeoutMs: this.requestTimeoutMs,
      },
    );
    await res.dump();
  }

  async json<T>(
    method: HttpMethod,
    path: string,
    body?: unknown,
    timeoutMs = this.requestTimeoutMs,
    signal?: AbortSignal,
  ): Promise<T> {
    const res = await this.send(method, path, {
      ...(body === undefined
        ? {}
        : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
      timeoutMs,
      signal,
    });
    try {
      return (await res.json()) as T;
    } catch (err) {
      throw failure(err, `${method} ${path}`, signal);
    }
  }

  /**
   * One request over the pooled connection, also for the feature modules that own their wire
   * details (sdk/src/sandboxd/*): an error answer becomes a SandboxError; the body of a success
   * is the caller's to consume. node:http rather than fetch: it skips the WHATWG stream layers
   * (which made 100 MiB uploads several times slower) and loads nothing. The deadline and
   * `signal` hold until the body is read; aborting `signal` rejects with its reason, as fetch
   * does.
   */
  async send(method: HttpMethod, path: string, o: RequestOptions = {}): Promise<Body> {
    o.signal?.throwIfAborted();
    const what = `${method} ${this.base}${path.split("?")[0]}`;
    let res: IncomingMessage;
    try {
      res = await this.exchange(method, path, o).catch((err: unknown) => {
        // A pooled connection the server closed as idle just as this request went out on it:
        // the request was never read. Sent again on a new connection when that cannot repeat
        // an effect (an idempotent method, a body that can be sent twice).
        if (!staleConnection(err) || !IDEMPOTENT.has(method) || o.body instanceof Readable)
          throw err;
        return this.exchange(method, path, o);
      });
    } catch (err) {
      throw failure(err, what, o.signal);
    }
    const status = res.statusCode ?? 500;
    const body = new Body(res);
    if (status < 400) return body;
    let text = "";
    try {
      text = await body.text();
    } catch {
      // cut off: the status is all there is
    }
    const e = errorEnvelope(text);
    if (e) throw fromBody(e);
    throw new SandboxError(
      `sandboxd answered HTTP ${status} to ${method} ${path.split("?")[0]}`,
      codeForAnswer(status),
    );
  }

  /**
   * Sends the request and resolves with the response once its head arrived. The deadline and
   * `signal` cut the request, and the response's body if it is still being read, with the
   * signal's reason (a TimeoutError for the deadline); with no deadline, a connection silent
   * for IDLE_TIMEOUT_MS is cut the same way, unless `timeoutMs` is null.
   */
  private exchange(method: HttpMethod, path: string, o: RequestOptions): Promise<IncomingMessage> {
    const signals = [o.timeoutMs == null ? undefined : AbortSignal.timeout(o.timeoutMs), o.signal];
    const signal = AbortSignal.any(signals.filter((x) => x !== undefined));
    const url = new URL(this.origin);
    const body = o.body;
    const headers: Record<string, string> = { ...this.headers, ...o.headers };
    if (typeof body === "string" || body instanceof Uint8Array)
      headers["content-length"] = String(Buffer.byteLength(body));
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    this.inFlight.add(finished);
    return new Promise<IncomingMessage>((resolve, reject) => {
      let res: IncomingMessage | undefined;
      const cut = (err: Error) => {
        req.destroy(err);
        res?.destroy(err);
      };
      const onAbort = () => cut(abortError(signal.reason));
      const settle = () => {
        signal.removeEventListener("abort", onAbort);
        this.inFlight.delete(finished);
        done();
      };
      const req = this.request({
        ...(this.socketPath
          ? { socketPath: this.socketPath }
          : { host: url.hostname, port: url.port || (url.protocol === "https:" ? 443 : 80) }),
        ...this.servername,
        agent: this.agent,
        method,
        path: this.prefix + path,
        headers,
      });
      if (o.timeoutMs === undefined)
        req.setTimeout(IDLE_TIMEOUT_MS, () =>
          cut(Object.assign(new Error("the connection went silent"), { name: "TimeoutError" })),
        );
      req.once("response", (r) => {
        res = r;
        // A body cut before its reader started fails that reader (its iterator sees the
        // error), not the process.
        r.on("error", () => undefined);
        r.once("close", settle);
        resolve(r);
      });
      req.on("error", (err) => {
        if (!res) settle();
        reject(req.reusedSocket && !res ? Object.assign(err, { [REUSED]: true }) : err);
      });
      req.once("close", () => {
        if (!res) settle();
      });
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      if (body instanceof Readable) {
        // Sent as it is read (chunked); a source that fails cuts the request with its error.
        body.once("error", (err) => req.destroy(err));
        body.pipe(req);
      } else req.end(body);
    });
  }
}

const IDEMPOTENT = new Set<HttpMethod>(["GET", "HEAD", "PUT", "DELETE"]);
/** Marks a request error that came on a pooled connection before any answer. */
const REUSED = Symbol("reused connection");

/** The error of a request sent on a kept-alive connection the server had just closed. */
function staleConnection(err: unknown): boolean {
  const e = err as { code?: string; [REUSED]?: boolean } | undefined;
  return !!e?.[REUSED] && (e.code === "ECONNRESET" || e.code === "EPIPE");
}

/** What a cut request or body fails with: the abort reason when it is an Error. */
function abortError(reason: unknown): Error {
  if (reason instanceof Error) return reason;
  return Object.assign(new Error("the request was aborted", { cause: reason }), {
    name: "AbortError",
  });
}

export function fromBody(e: ErrorBody): SandboxError {
  return new SandboxError(e.message, sandboxErrorCode(e.code) ?? "INTERNAL", e);
}

/** Whether `err` is a draining sandboxd's refusal: the request was not run (DRAIN_PATH). */
export function isDrainRefusal(err: unknown): boolean {
  return err instanceof SandboxError && (err.cause as Partial<ErrorBody>)?.draining === true;
}

/** Network-level failures: refused, reset, timed out. */
export function asSandboxError(err: unknown, what: string): SandboxError {
  if (err instanceof SandboxError) return err;
  const e = err as Error & { code?: string; cause?: { code?: string } };
  if (e?.name === "TimeoutError" || e?.name === "AbortError") {
    return new SandboxError(`${what}: no answer before the deadline`, "TIMEOUT", err);
  }
  const code = e?.code ?? e?.cause?.code;
  return new SandboxError(
    `${what}: cannot reach sandboxd${code ? ` (${code})` : ""}`,
    "CONNECTION_FAILED",
    err,
  );
}

/** What a failed call rejects with: the caller's abort reason when it aborted, as fetch does. */
export function failure(err: unknown, what: string, signal?: AbortSignal): unknown {
  return signal?.aborted ? signal.reason : asSandboxError(err, what);
}

/** Parses an NDJSON response body line by line. */
export async function* ndjson<T>(body: Body): AsyncGenerator<T> {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line.trim()) yield JSON.parse(line) as T;
    }
  }
  if (buffered.trim()) yield JSON.parse(buffered) as T;
}
