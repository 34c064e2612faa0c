/**
 * The DeerFlow / AIO-sandbox subset (docs/architecture.md#sandboxd), so DeerFlow's client (the
 * `agent-sandbox` package it pins) works against sandboxd unchanged: AIO's `{success, message,
 * data}` envelope (aio-envelope.ts), the context, file and shell routes it calls, each answering
 * the fields that client's models require. Shell and bash routes are in aio-shell.ts.
 *
 * File paths go through `files`: the native jail (the local provider, where the host is outside
 * the sandbox), or, in a container or pod (SANDBOXD_AIO_PATHS=any), a jail rooted at `/`, so any
 * path the sandbox user can reach is reachable here too, as it is with AIO and with bash.
 */
import { once } from "node:events";
import { arch, release, userInfo } from "node:os";
import { posix } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { randomUUID } from "node:crypto";
import type { Executor } from "./executor.ts";
import { STATE_DIR } from "./executor.ts";
import type { PathJail, JailPath } from "./jail.ts";
import { FlatJsonStream } from "./json-stream.ts";
import { MAX_SOURCE_BYTES, SandboxdError } from "./wire.ts";
import { body, ok, parse } from "./aio-envelope.ts";
import { readJson, sendJson, type Req, type Routes } from "./http.ts";
import { shellRoutes } from "./aio-shell.ts";
import { compilePattern, globEntries, globToRegExp, grepFiles } from "./search.ts";
import type { ShellSessions } from "./shell-sessions.ts";

const MiB = 1024 * 1024;
/** The largest file `/v1/file/write` takes (DeerFlow allows 50 MiB per upload). */
export const MAX_AIO_WRITE_BYTES = 100 * MiB;
/** Its body: base64 of the largest file, with room for the other fields. */
export const MAX_AIO_WRITE_BODY = Math.ceil(MAX_AIO_WRITE_BYTES / 3) * 4 + MiB;
const DEFAULT_MAX_GREP_FILE_BYTES = MiB;

/** ripgrep's common type aliases, by extension. */
const FILE_TYPES: Record<string, string[]> = {
  py: [".py", ".pyi"],
  js: [".js", ".mjs", ".cjs", ".jsx"],
  ts: [".ts", ".tsx", ".mts", ".cts"],
  go: [".go"],
  rust: [".rs"],
  java: [".java"],
  c: [".c", ".h"],
  cpp: [".cpp", ".cc", ".cxx", ".hpp", ".hh", ".h"],
  md: [".md", ".markdown"],
  json: [".json"],
  yaml: [".yaml", ".yml"],
  sh: [".sh", ".bash"],
  html: [".html", ".htm"],
  css: [".css"],
};

/** "1M", "500K", "2G" or a byte count. */
function parseSize(size: string | number | null | undefined): number {
  if (size == null) return DEFAULT_MAX_GREP_FILE_BYTES;
  if (typeof size === "number") return size;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMG]?)i?B?\s*$/i.exec(size);
  if (!m)
    throw new SandboxdError("INVALID_ARGUMENT", `max_file_size: ${size} is not a size like 1M`);
  const unit = { "": 1, K: 1024, M: MiB, G: 1024 * MiB }[m[2]!.toUpperCase()]!;
  return Math.floor(Number(m[1]) * unit);
}

export interface AioOptions {
  /** The native jail (Sandpit's state directory lives in it). */
  jail: PathJail;
  /** The jail AIO file paths resolve in: `jail` itself, or one rooted at `/`. */
  files: PathJail;
  executor: Executor;
  sessions: ShellSessions;
  version: string;
}

export function aioRoutes(r: Routes, o: AioOptions): void {
  const { jail, files, executor, sessions, version } = o;
  const json = (req: Req) => readJson(req, MAX_SOURCE_BYTES + 64 * 1024);

  r.get("/v1/sandbox", async (_req, res) => {
    const interp = await executor.interpreters();
    let user = "sandbox";
    try {
      user = userInfo().username;
    } catch {
      // a uid with no passwd entry
    }
    const context = {
      home_dir: files.defaultDir,
      workspace: files.defaultDir,
      version,
      detail: {
        system: {
          os: "linux",
          os_version: release(),
          arch: arch() === "x64" ? "x86_64" : arch() === "arm64" ? "aarch64" : arch(),
          user,
          home_dir: files.defaultDir,
          workspace: files.defaultDir,
          timezone: Intl.DateTimeFormat().resolvedOptions().timeZone,
          occupied_ports: [],
        },
        runtime: {
          python: [{ bin: interp.python, alias: ["python3", "python"] }],
          nodejs: [{ ver: process.versions.node, bin: interp.node, alias: ["node"] }],
        },
        utils: [
          {
            category: "sandboxd",
            tools: [
              { name: "bash", description: "persistent shell sessions (/v1/shell, /v1/bash)" },
              { name: "git", description: "version control" },
              { name: "curl", description: "HTTP client" },
            ],
          },
        ],
      },
    };
    // agent-sandbox's SandboxResponse reads these at the top level; `data` keeps older readers working.
    sendJson(res, { success: true, message: "ok", data: context, ...context });
  });

  shellRoutes(r, { files, executor, sessions, json });

  r.post("/v1/file/read", async (req, res) => {
    const b = await body("fileRead", req, json);
    const p = files.resolve(b.file);
    const { fh } = await files.openFileForRead(p);
    let content: string;
    try {
      content = await fh.readFile("utf8");
    } finally {
      await fh.close();
    }
    if (b.start_line != null || b.end_line != null) {
      content = content
        .split("\n")
        .slice(b.start_line ?? 0, b.end_line ?? undefined)
        .join("\n");
    }
    ok(res, { content, file: p.virtual });
  });

  r.post("/v1/file/write", async (req, res) => {
    const { fields, staged } = await stageWriteBody(req, jail);
    try {
      const b = await parse("fileWrite", fields);
      const p = files.resolve(b.file);
      const content = async function* (): AsyncGenerator<Buffer> {
        if (b.append) yield* existing(files, p);
        if (b.leading_newline) yield Buffer.from("\n");
        const { fh } = await jail.openFileForRead(staged);
        const stream = fh.createReadStream({ highWaterMark: MiB });
        yield* b.encoding === "base64" ? decodeBase64(stream) : stream;
        if (b.trailing_newline) yield Buffer.from("\n");
      };
      const bytes = await files.writeFile(p, Readable.from(capped(content())));
      ok(res, { file: p.virtual, bytes_written: bytes });
    } finally {
      await jail.remove(staged, false).catch(() => undefined);
    }
  });

  r.post("/v1/file/list", async (req, res) => {
    const b = await body("fileList", req, json);
    const depth = b.recursive ? (b.max_depth ?? 32) : 1;
    const root = files.resolve(b.path);
    const { entries, truncated } = await files.list(root, depth);
    const list = entries
      .filter(
        (e) =>
          b.show_hidden ||
          !posix
            .relative(root.virtual, e.path)
            .split("/")
            .some((part) => part.startsWith(".")),
      )
      .map((e) => ({
        name: e.name,
        path: e.path,
        is_directory: e.type === "dir",
        size: e.size,
        modified_time: new Date(e.modifiedMs).toISOString(),
        extension: e.type === "dir" ? null : posix.extname(e.name).slice(1) || null,
      }));
    ok(res, {
      path: root.virtual,
      files: list,
      total_count: list.length,
      directory_count: list.filter((f) => f.is_directory).length,
      file_count: list.filter((f) => !f.is_directory).length,
      truncated,
    });
  });

  r.post("/v1/file/find", async (req, res) => {
    const b = await body("fileFind", req, json);
    const root = files.resolve(b.path);
    const { entries } = await globEntries(files, root, b.glob, Infinity);
    const found = entries.filter((e) => e.type === "file").map((e) => e.path);
    ok(res, { path: root.virtual, files: found });
  });

  r.post("/v1/file/grep", async (req, res) => {
    const b = await body("fileGrep", req, json);
    const root = files.resolve(b.path);
    const pattern = compilePattern(b.pattern, {
      literal: b.fixed_strings,
      ignoreCase: b.case_insensitive,
      multiline: b.multiline,
    });
    const types = b.type ? FILE_TYPES[b.type] : null;
    if (b.type && !types) {
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `type: unknown file type ${JSON.stringify(b.type)}; one of ${Object.keys(FILE_TYPES).join(", ")}`,
      );
    }
    const r = await grepFiles(files, root, {
      pattern,
      multiline: b.multiline ?? false,
      include: b.include.map(globToRegExp),
      exclude: b.exclude.map(globToRegExp),
      extensions: types,
      maxFileBytes: parseSize(b.max_file_size),
      maxMatches: b.max_results ?? 500,
      offset: b.offset ?? 0,
      before: b.context_before ?? 0,
      after: b.context_after ?? 0,
      recursive: b.recursive !== false,
    });
    const matches = r.hits.map((h) => ({
      file: h.path,
      line_number: h.line,
      line_content: h.text,
      ...(h.before ? { context_before: h.before } : {}),
      ...(h.after ? { context_after: h.after } : {}),
    }));
    ok(res, {
      path: root.virtual,
      pattern: b.pattern,
      matches,
      match_count: matches.length,
      files_searched: r.filesSearched,
      files_matched: r.filesMatched,
      truncated: r.truncated,
    });
  });

  r.get("/v1/file/download", async (req, res) => {
    const p = files.resolve(req.query.path);
    const { fh, size } = await files.openFileForRead(p);
    res.statusCode = 200;
    res.setHeader("Content-Type", "application/octet-stream");
    res.setHeader("Content-Length", String(size));
    res.setHeader(
      "Content-Disposition",
      `attachment; filename="${encodeURIComponent(posix.basename(p.virtual))}"`,
    );
    const stream = fh.createReadStream({ highWaterMark: MiB });
    stream.on("error", (err) => res.destroy(err));
    stream.pipe(res);
  });
}

/**
 * Reads a `/v1/file/write` body as it arrives: `content` is unescaped into a staging file in
 * Sandpit's state directory (its `encoding` may come after it), the other fields are returned.
 * Nothing holds the body in memory.
 */
async function stageWriteBody(
  req: Req,
  jail: PathJail,
): Promise<{ fields: Record<string, unknown>; staged: JailPath }> {
  const tooLarge = () =>
    new SandboxdError(
      "PAYLOAD_TOO_LARGE",
      `request body is larger than ${MAX_AIO_WRITE_BODY} bytes (files up to ${MAX_AIO_WRITE_BYTES / MiB} MiB)`,
    );
  if (Number(req.headers["content-length"] ?? 0) > MAX_AIO_WRITE_BODY) throw tooLarge();
  const staged = jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/uploads/${randomUUID()}`);
  const sink = new PassThrough({ highWaterMark: MiB });
  sink.on("error", () => undefined); // reported through `written`
  const written = jail.writeFile(staged, sink);
  written.catch(() => undefined); // awaited below; a failure surfaces there
  const parser = new FlatJsonStream("content");
  let seen = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      seen += chunk.length;
      if (seen > MAX_AIO_WRITE_BODY) throw tooLarge();
      parser.feed(chunk);
      for (const piece of parser.drain()) {
        if (!sink.write(piece)) await once(sink, "drain");
      }
    }
    parser.end();
    for (const piece of parser.drain(true)) sink.write(piece);
    sink.end();
    await written;
  } catch (err) {
    sink.destroy(); // the staged write then fails too, and leaves nothing behind
    await written.catch(() => undefined);
    await jail.remove(staged, false).catch(() => undefined);
    throw err;
  }
  if (!parser.sawBig || typeof parser.fields.content !== "undefined") {
    await jail.remove(staged, false).catch(() => undefined);
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      parser.sawBig ? "content: expected a string" : "content: Required",
    );
  }
  return { fields: parser.fields, staged };
}

/** Base64 text to bytes, chunk by chunk (whitespace ignored, as decoders do). */
async function* decodeBase64(chunks: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let carry = "";
  for await (const chunk of chunks) {
    const text = carry + chunk.toString("latin1").replace(/\s+/g, "");
    if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(text)) {
      throw new SandboxdError("INVALID_ARGUMENT", "content is not valid base64");
    }
    const whole = text.length - (text.length % 4);
    if (whole > 0) yield Buffer.from(text.slice(0, whole), "base64");
    carry = text.slice(whole);
  }
  if (carry) yield Buffer.from(carry, "base64");
}

/** Passes bytes through, refusing a file larger than MAX_AIO_WRITE_BYTES (the write is dropped). */
async function* capped(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let total = 0;
  for await (const b of source) {
    total += b.length;
    if (total > MAX_AIO_WRITE_BYTES) {
      throw new SandboxdError(
        "PAYLOAD_TOO_LARGE",
        `the file would be larger than ${MAX_AIO_WRITE_BYTES / MiB} MiB`,
      );
    }
    yield b;
  }
}

/** A file's current bytes, streamed, or nothing when it does not exist (append). */
async function* existing(files: PathJail, p: JailPath): AsyncGenerator<Buffer> {
  let opened;
  try {
    opened = await files.openFileForRead(p);
  } catch (err) {
    if (err instanceof SandboxdError && err.code === "NOT_FOUND") return;
    throw err;
  }
  yield* opened.fh.createReadStream({ highWaterMark: MiB }) as AsyncIterable<Buffer>;
}
