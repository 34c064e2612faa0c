/**
 * The native file routes beyond read/write/stat/list/mkdir/delete (those are in server.ts):
 * move, append, glob, grep and watch (docs/architecture.md#files). Same token and same jail as
 * every native route: each path, both ends of a move included, is resolved by the jail.
 */
import { posix } from "node:path";
import type { Logger } from "./log.ts";
import { checkFields } from "./aio-envelope.ts";
import { readJson, sendJson, startStream, type Req, type Routes } from "./http.ts";
import type { PathJail } from "./jail.ts";
import {
  SandboxdError,
  type ErrorBody,
  type GlobResponse,
  type GrepResponse,
  type WatchStreamEvent,
} from "./wire.ts";
import { requestSchemas, type Parsed, type RequestSchema } from "./request-input.ts";
import { compilePattern, globEntries, globToRegExp, grepFiles } from "./search.ts";
import { WatchLimit, watchDirectory } from "./watch.ts";

const MiB = 1024 * 1024;
/** Files larger than this are not searched by grep (each searched file is read whole). */
const GREP_MAX_FILE_BYTES = 16 * MiB;
const DEFAULT_GREP_MATCHES = 1000;
/** A watch whose client reads this far behind is ended rather than buffered without bound. */
const WATCH_BACKLOG_BYTES = 4 * MiB;

export function filesRoutes(r: Routes, o: { jail: PathJail; logger: Logger }): void {
  const { jail, logger } = o;
  const json = (req: Req) => readJson(req, 64 * 1024);
  // These routes always named a problem AIO's way (`body: ...` when it is not one field's).
  const parse = async <K extends RequestSchema>(schema: K, body: unknown): Promise<Parsed<K>> =>
    checkFields((await requestSchemas())[schema](), body) as Parsed<K>;
  const watches = new WatchLimit();

  r.post("/v1/files/rename", async (req, res) => {
    const b = await parse("rename", await json(req));
    const from = jail.resolve(b.from);
    const to = jail.resolve(b.to);
    await jail.rename(from, to);
    sendJson(res, { from: from.virtual, to: to.virtual });
  });

  r.post("/v1/files/append", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const size = await jail.append(p, req);
    sendJson(res, { path: p.virtual, size });
  });

  r.post("/v1/files/glob", async (req, res) => {
    const b = await parse("glob", await json(req));
    let cwd = jail.resolve(b.cwd ?? jail.defaultDir);
    let pattern = b.pattern;
    if (pattern.startsWith("/")) {
      // An absolute pattern is taken from the root: its literal head narrows the walk anyway.
      cwd = jail.resolve(jail.virtualRoot);
      pattern = posix.relative(jail.virtualRoot, posix.normalize(pattern));
      if (pattern === "" || pattern.startsWith("..")) {
        throw new SandboxdError(
          "INVALID_ARGUMENT",
          `pattern ${JSON.stringify(b.pattern)} is outside ${jail.virtualRoot}`,
        );
      }
    }
    const { entries, truncated } = await globEntries(jail, cwd, pattern, b.limit ?? Infinity);
    const body: GlobResponse = { paths: entries.map((e) => e.path), truncated };
    sendJson(res, body);
  });

  r.post("/v1/files/grep", async (req, res) => {
    const b = await parse("grep", await json(req));
    const result = await grepFiles(jail, jail.resolve(b.path ?? jail.defaultDir), {
      pattern: compilePattern(b.pattern, b),
      include: b.glob ? [globToRegExp(b.glob)] : [],
      maxFileBytes: GREP_MAX_FILE_BYTES,
      maxMatches: b.maxMatches ?? DEFAULT_GREP_MATCHES,
    });
    const body: GrepResponse = {
      matches: result.hits.map(({ path, line, text }) => ({ path, line, text })),
      truncated: result.truncated || result.walkTruncated,
    };
    sendJson(res, body);
  });

  // NDJSON, one event a line, until the client hangs up. The status line goes out only once the
  // watch is active, so a client that saw it misses nothing it does afterwards.
  r.get("/v1/files/watch", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const recursive = req.query.recursive === "true" || req.query.recursive === "1";
    const release = watches.acquire();
    let gone = false;
    res.once("close", () => {
      gone = true;
      release();
    });
    let watch: { close(): void } | undefined;
    let ended = false;
    const send = (event: WatchStreamEvent) => {
      if (ended) return;
      res.write(JSON.stringify(event) + "\n");
      if (res.writableLength > WATCH_BACKLOG_BYTES)
        end(new SandboxdError("CAPACITY_EXCEEDED", "the client reads watch events too slowly"));
    };
    const end = (err: unknown) => {
      if (ended) return;
      ended = true;
      watch?.close();
      res.write(JSON.stringify({ type: "error", error: errorBody(err, logger) }) + "\n");
      res.end();
    };
    try {
      watch = await watchDirectory(jail, p, recursive, send, end);
    } catch (err) {
      release();
      throw err;
    }
    if (gone) return watch.close();
    res.once("close", () => watch?.close());
    startStream(res, "application/x-ndjson");
  });
}

function errorBody(err: unknown, logger: Logger): ErrorBody {
  if (err instanceof SandboxdError) return { code: err.code, message: err.message };
  logger.warn({ err }, "file watch failed");
  return { code: "INTERNAL", message: "the watch failed" };
}
