/**
 * sandboxd's HTTP API (docs/architecture.md). Every route but /healthz needs `Authorization: Bearer
 * <token>`; bodies are validated by the protocol schemas; every failure is a JSON error envelope
 * `{error: {code, message}}` with a matching status, never a stack trace or a host path.
 */
import express, { type NextFunction, type Request, type Response } from "express";
import type { Logger } from "pino";
import { aioRouter } from "./aio.ts";
import { filesRouter } from "./files.ts";
import { sendAioError } from "./aio-envelope.ts";
import type { CodeContexts } from "./contexts.ts";
import { contextRoutes } from "./contexts-routes.ts";
import type { Executor } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import { ptyRouter } from "./pty-routes.ts";
import type { Terminals } from "./ptys.ts";
import type { ProcessTable } from "./processes.ts";
import { processesRouter } from "./processes-api.ts";
import { parse, wantsNdjson } from "./request-input.ts";
import type { ShellSessions } from "./shell-sessions.ts";
import type { TokenGate } from "./token-gate.ts";
import type { Activity } from "./activity.ts";
import {
  CAPABILITIES,
  DRAIN_PATH,
  DrainRequest,
  drainingError,
  ExecuteCodeRequest,
  HTTP_STATUS,
  isAioPath,
  InitRequest,
  InstallPackagesRequest,
  MAX_SOURCE_BYTES,
  MkdirRequest,
  PROTOCOL_VERSION,
  RunCommandRequest,
  SandboxdError,
  type CommandStreamEvent,
  type DrainResponse,
  type ErrorBody,
  type HealthResponse,
} from "./protocol.ts";

export const VERSION = "0.1.0";
/** Files up to this size are read in one go; bigger ones are streamed. */
const SMALL_FILE_BYTES = 4 * 1024 * 1024;

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

export function createApp(opts: ServerOptions): express.Express {
  const { jail, executor, logger, gate } = opts;
  const app = express();
  app.disable("x-powered-by");
  app.set("query parser", "simple");

  app.get("/healthz", (_req, res) => {
    const body: HealthResponse = {
      ok: true,
      version: VERSION,
      protocol: PROTOCOL_VERSION,
      capabilities: CAPABILITIES,
      idleMs: opts.activity.idleMs(),
      draining: opts.activity.draining,
    };
    res.json(body);
  });

  app.use((req, res, next) => {
    // SANDBOXD_AIO_NO_AUTH opens the AIO routes only; every other route keeps the token check.
    const open = opts.aio.open && isAioPath(req.path);
    if (!open && !gate.accepts(req.headers.authorization)) {
      return next(new SandboxdError("UNAUTHORIZED", "missing or wrong bearer token"));
    }
    const drain = req.path === DRAIN_PATH;
    if (opts.activity.draining && !drain) return next(drainingError());
    // A drain request asks whether the sandbox is idle: it is not work, or it never would be.
    if (!drain) res.once("close", opts.activity.begin());
    next();
  });

  const json = express.json({ limit: MAX_SOURCE_BYTES + 64 * 1024 });

  app.post(DRAIN_PATH, json, (req, res) => {
    const { idleMs } = parse(DrainRequest, req.body);
    const body: DrainResponse = {
      drained: opts.activity.drain(idleMs),
      idleMs: opts.activity.idleMs(),
    };
    if (body.drained) res.once("close", opts.onDrained);
    res.json(body);
  });

  app.post("/v1/commands/run", json, async (req, res) => {
    const body = parse(RunCommandRequest, req.body);
    // A client that goes away (or aborts) takes its command's process group with it.
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    if (!wantsNdjson(req)) {
      res.json(await executor.runCommand(body, { signal: abort.signal }));
      return;
    }
    // Streamed: output chunks as they come, then the exit line. Errors after the headers went
    // out can no longer change the status, so they are reported as a final `error` line.
    res.status(200).type("application/x-ndjson");
    res.flushHeaders();
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

  app.post("/v1/code/execute", json, async (req, res) => {
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    res.json(await executor.executeCode(parse(ExecuteCodeRequest, req.body), abort.signal));
  });

  app.post("/v1/packages/install", json, async (req, res) => {
    const r = await executor.installPackages(parse(InstallPackagesRequest, req.body));
    res.json({ installed: true, durationMs: r.durationMs });
  });

  app.post("/v1/init", json, async (req, res) => {
    const body = parse(InitRequest, req.body);
    if (body.env) executor.setSandboxEnv(body.env);
    if (body.packages?.length) {
      await executor.installPackages({
        language: body.language ?? "python",
        packages: body.packages,
      });
    }
    gate.replace(body.token);
    res.json({ initialized: true });
  });

  app.get("/v1/files", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const { fh, size } = await jail.openFileForRead(p);
    res.status(200).type("application/octet-stream").setHeader("Content-Length", String(size));
    if (size <= SMALL_FILE_BYTES) {
      // One read and one write for small files; streams cost more than they save here.
      try {
        res.end(await fh.readFile());
      } finally {
        await fh.close();
      }
      return;
    }
    // 1 MiB reads: fewer thread-pool round trips than the 64 KiB default (measured in bench/).
    const stream = fh.createReadStream({ highWaterMark: 1024 * 1024 });
    stream.on("error", (err) => {
      logger.warn({ err, path: p.virtual }, "file read failed mid-stream");
      res.destroy(err);
    });
    stream.pipe(res);
  });

  app.put("/v1/files", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const length = Number(req.headers["content-length"] ?? NaN);
    // Small bodies are gathered and written with one call; large ones stream straight to disk.
    const size = await jail.writeFile(
      p,
      length <= SMALL_FILE_BYTES ? await collect(req, length) : req,
    );
    res.status(201).json({ path: p.virtual, size });
  });

  app.get("/v1/files/stat", async (req, res) => {
    res.json(await jail.stat(jail.resolve(req.query.path)));
  });

  app.get("/v1/files/list", async (req, res) => {
    const depth = req.query.depth === undefined ? 1 : Number(req.query.depth);
    if (!Number.isInteger(depth) || depth < 1 || depth > 32) {
      throw new SandboxdError("INVALID_ARGUMENT", "depth must be an integer from 1 to 32");
    }
    res.json(await jail.list(jail.resolve(req.query.path), depth));
  });

  app.post("/v1/files/mkdir", json, async (req, res) => {
    const p = jail.resolve(parse(MkdirRequest, req.body).path);
    await jail.mkdir(p);
    res.status(201).json({ path: p.virtual });
  });

  app.delete("/v1/files", async (req, res) => {
    const recursive = req.query.recursive === "true" || req.query.recursive === "1";
    await jail.remove(jail.resolve(req.query.path), recursive);
    res.status(204).end();
  });

  app.use(ptyRouter(opts.terminals));
  app.use(contextRoutes(opts.contexts));
  app.use(filesRouter({ jail, logger }));
  app.use(processesRouter(opts.processes, opts.terminals));

  // DeerFlow / AIO compatibility routes, behind the same token (unless opened, above).
  app.use(aioRouter({ jail, executor, version: VERSION, ...opts.aio }));

  app.use((_req, _res, next) => next(new SandboxdError("NOT_FOUND", "no such route")));

  // One error handler: AIO routes answer in AIO's envelope, the rest in sandboxd's.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const body = errorBody(err, logger);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (isAioPath(req.path)) sendAioError(res, HTTP_STATUS[body.code], body);
    else res.status(HTTP_STATUS[body.code]).json({ error: body });
  });

  return app;
}

async function collect(req: Request, length: number): Promise<Buffer> {
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
  const e = err as { type?: string; status?: number; message?: string };
  if (e?.type === "entity.too.large")
    return { code: "PAYLOAD_TOO_LARGE", message: "request body is too large" };
  if (e?.type === "entity.parse.failed")
    return { code: "INVALID_ARGUMENT", message: "request body is not valid JSON" };
  // A client that hung up mid-body (an aborted upload) is not a failure of sandboxd.
  if ((err as NodeJS.ErrnoException)?.code === "ECONNRESET")
    return { code: "INVALID_ARGUMENT", message: "the client aborted the request" };
  if (typeof e?.status === "number" && e.status >= 400 && e.status < 500) {
    return { code: "INVALID_ARGUMENT", message: e.message ?? "bad request" };
  }
  logger.error({ err }, "request failed");
  return { code: "INTERNAL", message: "internal error" };
}
