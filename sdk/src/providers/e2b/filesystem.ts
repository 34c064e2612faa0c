/**
 * The contract's filesystem on E2B's `sandbox.files` (envd's REST /files and the
 * filesystem.Filesystem service): rename is Move, stat is Stat, list depth is ListDir's depth,
 * watch is WatchDir, streams are `format: "stream"` reads and streamed octet-stream uploads.
 * envd has no append, glob or grep: append pipes the bytes, chunk by chunk, into `cat >>` in
 * the sandbox (nothing is read back); glob and grep run `find` / `grep` there (search.ts).
 */
import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import { FileType, type EntryInfo, type FilesystemEvent as E2BEvent } from "e2b";
import { SandboxError } from "../../errors.ts";
import type {
  FilesystemEvent,
  GrepMatch,
  GrepOptions,
  SandboxFileInfo,
  SandboxFilesystem,
  TransferOptions,
  WatchHandle,
} from "../../types.ts";
import { FilesystemExtras } from "../../unsupported.ts";
import { checkContent, checkSource } from "../../validate.ts";
import { abortReason, shq, VIRTUAL_ROOT, virtualPath } from "../cloud-common.ts";
import {
  checkPattern,
  findCommand,
  globRoot,
  grepCommand,
  matchGlob,
  parseGrep,
} from "../search.ts";
import { fromE2B } from "./errors.ts";
import type { E2BProcessHost } from "./processes.ts";

function fileInfo(e: EntryInfo): SandboxFileInfo {
  return {
    name: e.name,
    path: e.path,
    type:
      e.type === FileType.DIR
        ? "dir"
        : e.type === FileType.FILE
          ? "file"
          : e.type === FileType.SYMLINK
            ? "symlink"
            : "other",
    size: Number(e.size),
    ...(e.modifiedTime ? { modifiedTime: new Date(e.modifiedTime) } : {}),
  };
}

function bodyOf(content: string | Uint8Array): string | ArrayBuffer {
  checkContent(content);
  if (typeof content === "string") return content;
  return content.buffer.slice(
    content.byteOffset,
    content.byteOffset + content.byteLength,
  ) as ArrayBuffer;
}

/** A ReadableStream of what `data` yields (the SDK streams a ReadableStream body). */
function toStream(
  data: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
): ReadableStream<Uint8Array> {
  checkSource(data);
  if (data instanceof ReadableStream) return data;
  const it = (data as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { value, done } = await it.next();
      if (done) controller.close();
      else if (!(value instanceof Uint8Array))
        controller.error(new SandboxError("data must yield Uint8Array chunks", "INVALID_ARGUMENT"));
      else controller.enqueue(value);
    },
    async cancel() {
      await it.return?.();
    },
  });
}

export class E2BFilesystem extends FilesystemExtras implements SandboxFilesystem {
  private readonly host: E2BProcessHost;
  constructor(host: E2BProcessHost) {
    super("E2B");
    this.host = host;
  }

  private get files() {
    this.host.alive();
    return this.host.sandbox.files;
  }

  async read(path: string, o?: TransferOptions): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, o));
  }

  async readBytes(path: string, o: TransferOptions = {}): Promise<Uint8Array> {
    const p = virtualPath(path);
    try {
      return await this.files.read(p, { format: "bytes", ...signal(o) });
    } catch (err) {
      throw aborted(o, err) ?? fromE2B(err, `reading ${p}`);
    }
  }

  async write(path: string, content: string | Uint8Array, o: TransferOptions = {}): Promise<void> {
    const data = bodyOf(content);
    const p = virtualPath(path);
    try {
      await this.files.write(p, data, signal(o));
    } catch (err) {
      throw aborted(o, err) ?? fromE2B(err, `writing ${p}`);
    }
  }

  async list(path: string, o: { depth?: number } = {}): Promise<SandboxFileInfo[]> {
    const depth = o.depth ?? 1;
    if (!Number.isInteger(depth) || depth < 1)
      throw new SandboxError("depth must be a positive integer", "INVALID_ARGUMENT");
    const p = virtualPath(path);
    try {
      return (await this.files.list(p, { depth })).map(fileInfo);
    } catch (err) {
      throw fromE2B(err, `listing ${p}`);
    }
  }

  async exists(path: string): Promise<boolean> {
    const p = virtualPath(path);
    try {
      return await this.files.exists(p);
    } catch (err) {
      throw fromE2B(err, `checking ${p}`);
    }
  }

  async mkdir(path: string): Promise<void> {
    const p = virtualPath(path);
    try {
      await this.files.makeDir(p); // false when it already exists: fine
    } catch (err) {
      throw fromE2B(err, `creating directory ${p}`);
    }
  }

  async remove(path: string): Promise<void> {
    const p = virtualPath(path);
    if (p === VIRTUAL_ROOT)
      throw new SandboxError(`refusing to remove ${VIRTUAL_ROOT} itself`, "INVALID_ARGUMENT");
    // envd removes like `rm -rf` and says nothing about a missing path; the contract wants NOT_FOUND.
    if (!(await this.exists(p)))
      throw new SandboxError(`no such file or directory: ${p}`, "NOT_FOUND");
    try {
      await this.files.remove(p);
    } catch (err) {
      throw fromE2B(err, `removing ${p}`);
    }
  }

  override async rename(from: string, to: string): Promise<void> {
    const a = virtualPath(from);
    const b = virtualPath(to);
    if (a === VIRTUAL_ROOT)
      throw new SandboxError(`refusing to move ${VIRTUAL_ROOT} itself`, "INVALID_ARGUMENT");
    try {
      await this.files.rename(a, b);
    } catch (err) {
      throw fromE2B(err, `renaming ${a} to ${b}`);
    }
  }

  override async stat(path: string): Promise<SandboxFileInfo> {
    const p = virtualPath(path);
    try {
      return fileInfo(await this.files.getInfo(p));
    } catch (err) {
      throw fromE2B(err, `stat of ${p}`);
    }
  }

  override async append(
    path: string,
    content: string | Uint8Array,
    o: TransferOptions = {},
  ): Promise<void> {
    checkContent(content);
    const p = virtualPath(path);
    if (o.signal?.aborted) throw abortReason(o.signal);
    const data = typeof content === "string" ? new TextEncoder().encode(content) : content;
    // Missing parents are made, as for write.
    const r = await this.host.exec(`mkdir -p -- ${shq(posix.dirname(p))} && cat >> ${shq(p)}`, {
      cwd: "/",
      timeoutMs: 30 * 60_000,
      stdin: data,
    });
    if (r.exitCode !== 0) {
      const msg = r.stderr.trim();
      throw new SandboxError(
        `E2B: appending to ${p} failed: ${msg}`,
        /No such file or directory/.test(msg)
          ? "NOT_FOUND"
          : /Is a directory/.test(msg)
            ? "CONFLICT"
            : "EXECUTION_FAILED",
      );
    }
  }

  override async glob(pattern: string, o: { cwd?: string } = {}): Promise<string[]> {
    checkPattern(pattern, "pattern");
    const { root, relative } = globRoot(pattern, virtualPath(o.cwd ?? this.host.workingDirectory));
    const r = await this.host.exec(findCommand(root), { cwd: "/", timeoutMs: 5 * 60_000 });
    return matchGlob(r.stdout, root, relative);
  }

  override async grep(pattern: string, o: GrepOptions = {}): Promise<GrepMatch[]> {
    checkPattern(pattern, "pattern");
    const plan = grepCommand(pattern, o, this.host.workingDirectory);
    const r = await this.host.exec(plan.command, { cwd: "/", timeoutMs: 5 * 60_000 });
    if (r.exitCode !== 0)
      throw new SandboxError(
        `E2B: grep failed: ${r.stderr.trim()}`,
        /No such file/.test(r.stderr) ? "NOT_FOUND" : "INVALID_ARGUMENT",
      );
    return parseGrep(r.stdout, plan.max);
  }

  override async watch(
    path: string,
    onEvent: (event: FilesystemEvent) => void,
    o: { recursive?: boolean; signal?: AbortSignal } = {},
  ): Promise<WatchHandle> {
    if (typeof onEvent !== "function")
      throw new SandboxError("onEvent must be a function", "INVALID_ARGUMENT");
    const p = virtualPath(path);
    if (o.signal?.aborted) throw abortReason(o.signal);
    let handle;
    try {
      handle = await this.files.watchDir(
        p,
        (e: E2BEvent) => onEvent({ type: e.type, path: posix.join(p, e.name) }),
        // No deadline: the watch lasts until it is stopped.
        { recursive: o.recursive ?? false, timeoutMs: 0 },
      );
    } catch (err) {
      throw fromE2B(err, `watching ${p}`);
    }
    const stop = async () => handle.stop();
    o.signal?.addEventListener("abort", () => void stop(), { once: true });
    return { stop };
  }

  override async readStream(
    path: string,
    o: TransferOptions = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const p = virtualPath(path);
    try {
      return await this.files.read(p, { format: "stream", ...signal(o) });
    } catch (err) {
      throw aborted(o, err) ?? fromE2B(err, `reading ${p}`);
    }
  }

  /** Streams into a hidden file beside the target, then renames it over the target. */
  override async writeStream(
    path: string,
    data: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    o: TransferOptions = {},
  ): Promise<void> {
    const p = virtualPath(path);
    const body = toStream(data);
    const part = posix.join(posix.dirname(p), `.${posix.basename(p)}.${randomUUID()}.part`);
    try {
      await this.files.write(part, body, { useOctetStream: true, ...signal(o) });
      await this.files.rename(part, p);
    } catch (err) {
      await this.files.remove(part).catch(() => undefined);
      throw aborted(o, err) ?? fromE2B(err, `writing ${p}`);
    }
  }
}

function signal(o: TransferOptions): { signal?: AbortSignal } {
  return o.signal ? { signal: o.signal } : {};
}

/** The abort's reason when `o.signal` ended the transfer (the SDK wraps it otherwise). */
function aborted(o: TransferOptions, _err: unknown): unknown {
  return o.signal?.aborted ? abortReason(o.signal) : undefined;
}
