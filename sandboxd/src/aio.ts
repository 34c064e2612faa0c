/**
 * The DeerFlow / AIO-sandbox subset (docs/architecture.md#sandboxd), so DeerFlow's client works
 * against sandboxd unchanged: the `{success, message, data}` envelope and the routes DeerFlow
 * calls. Everything goes through the same executor and path jail as the native API.
 *
 * Differences from the AIO image, on purpose: commands run synchronously (`async_mode` is
 * refused with a clear message rather than half-supported), and shell "sessions" carry no state
 * between commands; the session id is echoed so clients that track it keep working.
 */
import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import { z } from "zod";
import type { Executor } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import {
  HTTP_STATUS,
  LANGUAGES,
  MAX_SOURCE_BYTES,
  SandboxdError,
  type FileEntry,
} from "./protocol.ts";

const DEFAULT_TRUNCATE = 30_000;
const MAX_GREP_FILE_BYTES = 1024 * 1024;

const seconds = z
  .number()
  .positive()
  .max(24 * 3600);
const ShellExec = z.object({
  command: z.string().min(1).max(MAX_SOURCE_BYTES),
  id: z.string().max(200).optional(),
  exec_dir: z.string().optional(),
  async_mode: z.boolean().optional(),
  timeout: seconds.optional(),
  hard_timeout: seconds.optional(),
  no_change_timeout: seconds.optional(),
  truncate: z.number().int().positive().optional(),
});
const BashExec = z.object({
  command: z.string().min(1).max(MAX_SOURCE_BYTES),
  session_id: z.string().max(200).optional(),
  exec_dir: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  async_mode: z.boolean().optional(),
  timeout: seconds.optional(),
  hard_timeout: seconds.optional(),
  max_output_length: z.number().int().positive().optional(),
});
const FileRead = z.object({
  file: z.string(),
  start_line: z.number().int().min(0).optional(),
  end_line: z.number().int().min(0).optional(),
});
const FileWrite = z.object({
  file: z.string(),
  content: z.string().max(MAX_SOURCE_BYTES),
  encoding: z.enum(["utf-8", "base64", "raw"]).default("utf-8"),
  append: z.boolean().default(false),
  leading_newline: z.boolean().default(false),
  trailing_newline: z.boolean().default(false),
});
const FileList = z.object({
  path: z.string(),
  recursive: z.boolean().default(false),
  show_hidden: z.boolean().default(false),
  max_depth: z.number().int().min(1).max(32).optional(),
});
const FileFind = z.object({ path: z.string(), glob: z.string().min(1).max(1000) });
const FileGrep = z.object({
  path: z.string(),
  pattern: z.string().min(1).max(10_000),
  include: z.string().max(1000).optional(),
  case_insensitive: z.boolean().default(false),
  fixed_strings: z.boolean().default(false),
  max_results: z.number().int().positive().max(10_000).default(500),
});

/** AIO's envelope: every answer is 200 with success/message/data, or an error status with the same shape. */
function ok(res: Response, data: unknown, message = "ok"): void {
  res.json({ success: true, message, data });
}

function body<T extends z.ZodType>(schema: T, req: Request): z.infer<T> {
  const r = schema.safeParse(req.body ?? {});
  if (!r.success) {
    const i = r.error.issues[0];
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      `${i?.path.join(".") || "body"}: ${i?.message ?? "invalid"}`,
    );
  }
  return r.data;
}

function refuseAsync(asyncMode: boolean | undefined): void {
  if (asyncMode) {
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      "async_mode is not supported by sandboxd: run the command synchronously",
    );
  }
}

function timeoutMs(o: {
  timeout?: number | undefined;
  hard_timeout?: number | undefined;
}): number | undefined {
  const s = o.hard_timeout ?? o.timeout;
  return s === undefined ? undefined : Math.ceil(s * 1000);
}

/** AIO truncates long output in the middle, keeping both ends. */
function truncateMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n... [${text.length - max} characters truncated] ...\n${text.slice(-half)}`;
}

/** Shell glob (*, ?, **) to a regular expression over virtual paths relative to the search root. */
function globToRegExp(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      re += glob[i + 2] === "/" ? "(?:.*/)?" : ".*";
      i += glob[i + 2] === "/" ? 2 : 1;
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

export function aioRouter(jail: PathJail, executor: Executor, version: string): Router {
  const r = express.Router();
  const json = express.json({ limit: MAX_SOURCE_BYTES + 64 * 1024 });

  r.get("/v1/sandbox", (_req, res) => {
    ok(res, {
      home_dir: jail.defaultDir,
      workspace: jail.defaultDir,
      version,
      detail: { system: { os: "linux" }, runtime: { languages: LANGUAGES }, utils: ["sandboxd"] },
    });
  });

  r.post("/v1/shell/exec", json, async (req, res) => {
    const b = body(ShellExec, req);
    refuseAsync(b.async_mode);
    const result = await executor.runCommand({
      command: b.command,
      ...(b.exec_dir ? { cwd: b.exec_dir } : {}),
      ...pickTimeout(b),
    });
    const output = truncateMiddle(result.stdout + result.stderr, b.truncate ?? DEFAULT_TRUNCATE);
    ok(res, {
      session_id: b.id ?? randomUUID(),
      command: b.command,
      status: result.timedOut ? "hard_timeout" : "completed",
      output,
      exit_code: result.exitCode,
      console: [{ ps1: "", command: b.command, output }],
    });
  });

  r.post("/v1/bash/exec", json, async (req, res) => {
    const b = body(BashExec, req);
    refuseAsync(b.async_mode);
    const result = await executor.runCommand({
      command: b.command,
      ...(b.exec_dir ? { cwd: b.exec_dir } : {}),
      ...(b.env ? { env: b.env } : {}),
      ...pickTimeout(b),
    });
    const max = b.max_output_length ?? 50_000;
    ok(res, {
      session_id: b.session_id ?? randomUUID(),
      command_id: randomUUID(),
      command: b.command,
      status: result.timedOut ? "hard_timeout" : "completed",
      stdout: truncateMiddle(result.stdout, max),
      stderr: truncateMiddle(result.stderr, max),
      exit_code: result.exitCode,
      offset: Buffer.byteLength(result.stdout),
      stderr_offset: Buffer.byteLength(result.stderr),
    });
  });

  r.post("/v1/bash/output", json, () => {
    throw new SandboxdError(
      "NOT_FOUND",
      "no running command: sandboxd runs bash commands synchronously",
    );
  });

  r.post("/v1/file/read", json, async (req, res) => {
    const b = body(FileRead, req);
    const p = jail.resolve(b.file);
    const { fh } = await jail.openFileForRead(p);
    let content: string;
    try {
      content = await fh.readFile("utf8");
    } finally {
      await fh.close();
    }
    if (b.start_line !== undefined || b.end_line !== undefined) {
      content = content
        .split("\n")
        .slice(b.start_line ?? 0, b.end_line)
        .join("\n");
    }
    ok(res, { content, file: p.virtual });
  });

  r.post("/v1/file/write", json, async (req, res) => {
    const b = body(FileWrite, req);
    const p = jail.resolve(b.file);
    let bytes =
      b.encoding === "base64" ? Buffer.from(b.content, "base64") : Buffer.from(b.content, "utf8");
    if (b.leading_newline) bytes = Buffer.concat([Buffer.from("\n"), bytes]);
    if (b.trailing_newline) bytes = Buffer.concat([bytes, Buffer.from("\n")]);
    if (b.append) {
      const existing = await readIfExists(jail, b.file);
      bytes = Buffer.concat([existing, bytes]);
    }
    await jail.writeFile(p, bytes);
    ok(res, { file: p.virtual, bytes_written: bytes.length });
  });

  r.post("/v1/file/list", json, async (req, res) => {
    const b = body(FileList, req);
    const depth = b.recursive ? (b.max_depth ?? 32) : 1;
    const { entries, truncated } = await jail.list(jail.resolve(b.path), depth);
    const files = entries
      .filter((e) => b.show_hidden || !e.path.split("/").some((part) => part.startsWith(".")))
      .map((e) => ({
        name: e.name,
        path: e.path,
        is_directory: e.type === "dir",
        size: e.size,
        modified_time: new Date(e.modifiedMs).toISOString(),
      }));
    ok(res, { path: jail.resolve(b.path).virtual, files, total_count: files.length, truncated });
  });

  r.post("/v1/file/find", json, async (req, res) => {
    const b = body(FileFind, req);
    const root = jail.resolve(b.path);
    const re = globToRegExp(b.glob);
    const { entries } = await jail.list(root, 32);
    const files = entries
      .filter((e) => e.type === "file" && re.test(posix.relative(root.virtual, e.path)))
      .map((e) => e.path);
    ok(res, { path: root.virtual, files });
  });

  r.post("/v1/file/grep", json, async (req, res) => {
    const b = body(FileGrep, req);
    const root = jail.resolve(b.path);
    let pattern: RegExp;
    try {
      const source = b.fixed_strings ? b.pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") : b.pattern;
      pattern = new RegExp(source, b.case_insensitive ? "i" : "");
    } catch (err) {
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `pattern is not a valid regular expression: ${(err as Error).message}`,
      );
    }
    const include = b.include ? globToRegExp(b.include) : null;
    const stat = await jail.stat(root);
    const candidates: FileEntry[] =
      stat.type === "file" ? [stat] : (await jail.list(root, 32)).entries;
    const matches: { file: string; line_number: number; line_content: string }[] = [];
    let truncated = false;
    for (const entry of candidates) {
      if (entry.type !== "file" || entry.size > MAX_GREP_FILE_BYTES) continue;
      if (include && !include.test(entry.name)) continue;
      const text = (await readIfExists(jail, entry.path)).toString("utf8");
      const lines = text.split("\n");
      for (let i = 0; i < lines.length; i++) {
        if (!pattern.test(lines[i]!)) continue;
        if (matches.length >= b.max_results) {
          truncated = true;
          break;
        }
        matches.push({ file: entry.path, line_number: i + 1, line_content: lines[i]! });
      }
      if (truncated) break;
    }
    ok(res, { matches, match_count: matches.length, truncated });
  });

  r.get("/v1/file/download", async (req, res) => {
    const p = jail.resolve(req.query.path);
    const { fh, size } = await jail.openFileForRead(p);
    res.status(200).type("application/octet-stream");
    res.setHeader("Content-Length", String(size));
    res.setHeader(
      "Content-Disposition",
      `attachment; filename="${encodeURIComponent(posix.basename(p.virtual))}"`,
    );
    const stream = fh.createReadStream({ highWaterMark: 1024 * 1024 });
    stream.on("error", (err) => res.destroy(err));
    stream.pipe(res);
  });

  // Errors keep AIO's envelope (success: false), plus sandboxd's own error object.
  r.use((err: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (!(err instanceof SandboxdError) || res.headersSent) return next(err);
    res.status(HTTP_STATUS[err.code]).json({
      success: false,
      message: err.message,
      data: null,
      error: { code: err.code, message: err.message },
    });
  });

  return r;
}

function pickTimeout(o: { timeout?: number | undefined; hard_timeout?: number | undefined }): {
  timeoutMs?: number;
} {
  const ms = timeoutMs(o);
  return ms === undefined ? {} : { timeoutMs: ms };
}

/** A file's bytes through the jail, or empty when it does not exist (append, grep). */
async function readIfExists(jail: PathJail, path: string): Promise<Buffer> {
  try {
    const { fh } = await jail.openFileForRead(jail.resolve(path));
    try {
      return await fh.readFile();
    } finally {
      await fh.close();
    }
  } catch (err) {
    if (err instanceof SandboxdError && err.code === "NOT_FOUND") return Buffer.alloc(0);
    throw err;
  }
}
