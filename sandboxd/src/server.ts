/**
 * sandboxd's HTTP API (docs/architecture.md). Every route but /healthz needs `Authorization: Bearer
 * <token>`; bodies are validated by the protocol schemas; every failure is a JSON error envelope
 * `{error: {code, message}}` with a matching status, never a stack trace or a host path.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "./log.ts";
import { aioRoutes } from "./aio.ts";
import { sendFileBody } from "./file-body.ts";
import { filesRoutes } from "./files.ts";
import {
  HttpError,
  prepare,
  readJson,
  Routes,
  sendEmpty,
  sendJson,
  startStream,
  type Req,
  type Res,
} from "./http.ts";
import { sendAioError } from "./aio-envelope.ts";
import type { CodeContexts } from "./contexts.ts";
import { contextRoutes } from "./contexts-routes.ts";
import type { Executor } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import { ptyRoutes } from "./pty-routes.ts";
import type { Terminals } from "./ptys.ts";
import type { ProcessTable } from "./processes.ts";
import { processesRoutes } from "./processes-api.ts";
import { parse, wantsNdjson } from "./request-input.ts";
import type { ShellSessions } from "./shell-sessions.ts";
import type { TokenGate } from "./token-gate.ts";
import type { Activity } from "./activity.ts";
import {
  CAPABILITIES,
  DRAIN_PATH,
  drainingError,
  HTTP_STATUS,
  isAioPath,
  MAX_SOURCE_BYTES,
  PROTOCOL_VERSION,
  SandboxdError,
  type CommandStreamEvent,
  type DrainResponse,
  type ErrorBody,
  type HealthResponse,
  type ReadyResponse,
} from "./wire.ts";

/** Bodies up to this size are gathered and written in one go; bigger ones are streamed. */
const SMALL_FILE_BYTES = 4 * 1024 * 1024;

export const VERSION = "0.1.0";

export interface ServerOptions {
  jail: PathJail;
  executor: Executor;
  /** Shared with the port tunnel, which authenticates the same way. */
  gate: TokenGate;
  logger: Logger;
  terminals: Terminals;
  /** Persistent interpreters (code contexts). */
  contexts: CodeContexts;
  processes: ProcessTable;
  /** Whether the network policy holds (SANDBOXD_ISOLATION_PROBE), reported by /healthz and /readyz. */
  isolation?: { readonly isolated: boolean } | undefined;
  /** The idle measure /healthz reports; every authenticated request counts as activity. */
  activity: Activity;
  /** Called once a drain succeeded and its answer went out (sandboxd then exits). */
  onDrained: () => void;
  aio: {
    /** The jail AIO file paths resolve in (see aio.ts). */
    files: PathJail;
    sessions: ShellSessions;
    /** SANDBOXD_AIO_NO_AUTH: the AIO routes need no token. */
    open: boolean;
  };
}

/** sandboxd's HTTP app: its route tables and the request listener serving them. */
export interface App {
  /** The routes open without a token (/healthz, /readyz). */
  open: Routes;
  /** Every other route: each needs the token (the AIO ones not, with SANDBOXD_AIO_NO_AUTH). */
  routes: Routes;
  handle(req: IncomingMessage, res: ServerResponse): void;
}

/** The JSON body limit of the routes that carry code or commands. */
const SOURCE_BODY_BYTES = MAX_SOURCE_BYTES + 64 * 1024;

export function createApp(opts: ServerOptions): App {
  const { jail, executor, logger, gate } = opts;
  const open = new Routes();
  const r = new Routes();
  const json = (req: Req) => readJson(req, SOURCE_BODY_BYTES);

  open.get("/healthz", (_req, res) => {
    const body: HealthResponse = {
      ok: true,
      version: VERSION,
      protocol: PROTOCOL_VERSION,
      capabilities: CAPABILITIES,
      idleMs: opts.activity.idleMs(),
      draining: opts.activity.draining,
      ...(opts.isolation ? { isolated: opts.isolation.isolated } : {}),
    };
    sendJson(res, body);
  });

  // The pod's readiness probe: a warm pod is claimed, and a sandbox Ready, only once it holds.
  open.get("/readyz", (_req, res) => {
    const body: ReadyResponse =
      opts.isolation && !opts.isolation.isolated
        ? { ready: false, reason: "the sandbox's network policy is not in force yet" }
        : opts.activity.draining
          ? { ready: false, reason: "draining" }
          : { ready: true };
    sendJson(res, body, body.ready ? 200 : 503);
  });

  r.post(DRAIN_PATH, async (req, res) => {
    const { idleMs } = await parse("drain", await json(req));
    const body: DrainResponse = {
      drained: opts.activity.drain(idleMs),
      idleMs: opts.activity.idleMs(),
    };
    if (body.drained) res.once("close", opts.onDrained);
    sendJson(res, body);
  });

  r.post("/v1/commands/run", async (req, res) => {
    const body = await parse("runCommand", await json(req));
    // A client that goes away (or aborts) takes its command's process group with it.
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    if (!wantsNdjson(req)) {
      sendJson(res, await executor.runCommand(body, { signal: abort.signal }));
      return;
    }
    // Streamed: output chunks as they come, then the exit line. Errors after the headers went
    // out can no longer change the status, so they are reported as a final `error` line.
    startStream(res, "application/x-ndjson");
    const send = (event: CommandStreamEvent) => res.write(JSON.stringify(event) + "\n");
    try {
      const {
        stdout: _o,
        stderr: _e,
        ...exit
      } = await executor.runCommand(body, {
        onChunk: (stream, data, offset) => send({ stream, data, offset }),
        signal: abort.signal,
      });
      send({ stream: "exit", ...exit });
    } catch (err) {
      send({ stream: "error", error: errorBody(err, logger) });
    }
    res.end();
  });

  r.post("/v1/code/execute", async (req, res) => {
    const body = await parse("executeCode", await json(req));
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    sendJson(res, await executor.executeCode(body, abort.signal));
  });

  r.post("/v1/packages/install", async (req, res) => {
    const r = await executor.installPackages(await parse("installPackages", await json(req)));
    sendJson(res, { installed: true, durationMs: r.durationMs });
  });

  r.post("/v1/init", async (req, res) => {
    const body = await parse("init", await json(req));
    if (body.env) executor.setSandboxEnv(body.env);
    if (body.packages?.length) {
      await executor.installPackages({
        language: body.language ?? "python",
        packages: body.packages,
      });
    }
    gate.replace(body.token);
    sendJson(res, { initialized: true });
  });

  r.get("/v1/files", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const { fh, size } = await jail.openFileForRead(p);
    res.statusCode = 200;
    res.setHeader("Content-Type", "application/octet-stream");
    await sendFileBody(res, fh, size, logger, p.virtual);
  });

  r.put("/v1/files", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const length = Number(req.headers["content-length"] ?? NaN);
    // Small bodies are gathered and written with one call; large ones stream straight to disk.
    const size = await jail.writeFile(
      p,
      length <= SMALL_FILE_BYTES ? await collect(req, length) : req,
    );
    sendJson(res, { path: p.virtual, size }, 201);
  });

  r.get("/v1/files/stat", async (req, res) => {
    sendJson(res, await jail.stat(jail.resolve(req.query.path)));
  });

  r.get("/v1/files/list", async (req, res) => {
    const depth = req.query.depth === undefined ? 1 : Number(req.query.depth);
    if (!Number.isInteger(depth) || depth < 1 || depth > 32) {
      throw new SandboxdError("INVALID_ARGUMENT", "depth must be an integer from 1 to 32");
    }
    sendJson(res, await jail.list(jail.resolve(req.query.path), depth));
  });

  r.post("/v1/files/mkdir", async (req, res) => {
    const p = jail.resolve((await parse("mkdir", await json(req))).path);
    await jail.mkdir(p);
    sendJson(res, { path: p.virtual }, 201);
  });

  r.delete("/v1/files", async (req, res) => {
    const recursive = req.query.recursive === "true" || req.query.recursive === "1";
    await jail.remove(jail.resolve(req.query.path), recursive);
    sendEmpty(res);
  });

  ptyRoutes(r, opts.terminals);
  contextRoutes(r, opts.contexts);
  filesRoutes(r, { jail, logger });
  processesRoutes(r, opts.processes, opts.terminals);
  // DeerFlow / AIO compatibility routes, behind the same token (unless opened, below).
  aioRoutes(r, { jail, executor, version: VERSION, ...opts.aio });

  async function serve(req: Req, res: Res): Promise<void> {
    const method = req.method ?? "GET";
    const openRoute = open.find(method, req.path);
    if (openRoute) return void (await openRoute.route.handler(req, res));
    // SANDBOXD_AIO_NO_AUTH opens the AIO routes only; every other route keeps the token check.
    const aioOpen = opts.aio.open && isAioPath(req.path);
    if (!aioOpen && !gate.accepts(req.headers.authorization))
      throw new SandboxdError("UNAUTHORIZED", "missing or wrong bearer token");
    const drain = req.path.toLowerCase().replace(/\/$/, "") === DRAIN_PATH; // as routes match
    if (opts.activity.draining && !drain) throw drainingError();
    // A drain request asks whether the sandbox is idle: it is not work, or it never would be.
    if (!drain) res.once("close", opts.activity.begin());
    const found = r.find(method, req.path);
    if (!found) throw new SandboxdError("NOT_FOUND", "no such route");
    req.params = found.params;
    await found.route.handler(req, res);
  }

  // One error answer: AIO routes answer in AIO's envelope, the rest in sandboxd's.
  function fail(req: Req, res: Res, err: unknown): void {
    const body = errorBody(err, logger);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const status = err instanceof HttpError ? err.status : HTTP_STATUS[body.code];
    if (isAioPath(req.path)) sendAioError(res, status, body);
    else sendJson(res, { error: body }, status);
  }

  return {
    open,
    routes: r,
    handle(incoming, res) {
      const req = prepare(incoming);
      serve(req, res).catch((err: unknown) => fail(req, res, err));
    },
  };
}

async function collect(req: Req, length: number): Promise<Buffer> {
  const body = Buffer.allocUnsafe(length);
  let at = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    if (at + chunk.length > length)
      throw new SandboxdError("INVALID_ARGUMENT", "request body is longer than its Content-Length");
    chunk.copy(body, at);
    at += chunk.length;
  }
  if (at !== length)
    throw new SandboxdError("INVALID_ARGUMENT", "request body ended before its Content-Length");
  return body;
}

/** Client errors pass through; anything else is logged and reported without internals. */
function errorBody(err: unknown, logger: Logger): ErrorBody {
  if (err instanceof SandboxdError)
    return { code: err.code, message: err.message, ...(err.draining ? { draining: true } : {}) };
  // A client that hung up mid-body (an aborted upload) is not a failure of sandboxd.
  if ((err as NodeJS.ErrnoException)?.code === "ECONNRESET")
    return { code: "INVALID_ARGUMENT", message: "the client aborted the request" };
  logger.error({ err }, "request failed");
  return { code: "INTERNAL", message: "internal error" };
}
