/**
 * The contract's filesystem on Daytona's toolbox (`sandbox.fs`): rename is `moveFiles`, stat is
 * `getFileDetails`, list depth is `listFiles`' depth, glob narrows with `searchFiles` (names
 * matching the last segment) and applies the whole pattern here, streams are
 * `downloadFileStream` / `uploadFileStream`. The toolbox has no append and no watch; append
 * uploads the bytes beside the file and concatenates them in the sandbox (nothing is read
 * back), watch is NOT_SUPPORTED. grep runs `grep` in the sandbox (search.ts): `findFiles`
 * matches plain substrings only, without case folding or a file-name filter.
 */
import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import { Readable } from "node:stream";
import { DaytonaNotFoundError, type Sandbox } from "@daytonaio/sdk";
import { SandboxError } from "../../errors.ts";
import type {
  GrepMatch,
  GrepOptions,
  SandboxExecutionResult,
  SandboxFileInfo,
  SandboxFilesystem,
  TransferOptions,
} from "../../types.ts";
import { FilesystemExtras } from "../../unsupported.ts";
import { checkContent, checkSource } from "../../validate.ts";
import { abortReason, shq, VIRTUAL_ROOT, virtualPath } from "../cloud-common.ts";
import { checkPattern, globRoot, grepCommand, parseGrep } from "../search.ts";
import { fromDaytona } from "./errors.ts";

type FileInfo = Awaited<ReturnType<Sandbox["fs"]["getFileDetails"]>>;

/** Transfers may take long (Daytona timeouts are seconds). */
const TRANSFER_SECONDS = 30 * 60;

export interface DaytonaFilesHost {
  readonly sandbox: Sandbox;
  readonly workingDirectory: string;
  alive(): void;
  exec(command: string, o: { cwd: string; timeoutMs: number }): Promise<SandboxExecutionResult>;
}

function fileInfo(dir: string, e: FileInfo): SandboxFileInfo {
  const when = new Date(e.modifiedAt || e.modTime);
  const path = e.path ? (e.path.startsWith("/") ? e.path : posix.join(dir, e.path)) : undefined;
  return {
    name: e.name,
    path: path ?? posix.join(dir, e.name),
    // Go's FileMode string: "d" directory, "L" symlink.
    type: e.isDir ? "dir" : /^L/.test(e.mode ?? "") ? "symlink" : "file",
    size: Number(e.size),
    ...(Number.isNaN(when.getTime()) ? {} : { modifiedTime: when }),
  };
}

function toBuffer(content: string | Uint8Array): Buffer {
  checkContent(content);
  if (typeof content === "string") return Buffer.from(content, "utf8");
  return Buffer.from(content.buffer, content.byteOffset, content.byteLength);
}

function aborted(o: TransferOptions): unknown {
  return o.signal?.aborted ? abortReason(o.signal) : undefined;
}

export class DaytonaFilesystem extends FilesystemExtras implements SandboxFilesystem {
  private readonly host: DaytonaFilesHost;
  constructor(host: DaytonaFilesHost) {
    super("Daytona");
    this.host = host;
  }

  private get fs() {
    this.host.alive();
    return this.host.sandbox.fs;
  }

  async read(path: string, o?: TransferOptions): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, o));
  }

  async readBytes(path: string, o: TransferOptions = {}): Promise<Uint8Array> {
    const p = virtualPath(path);
    if (aborted(o)) throw aborted(o);
    try {
      return new Uint8Array(await this.fs.downloadFile(p, TRANSFER_SECONDS));
    } catch (err) {
      throw fromDaytona(err, `reading ${p}`);
    }
  }

  async write(path: string, content: string | Uint8Array, o: TransferOptions = {}): Promise<void> {
    const data = toBuffer(content);
    const p = virtualPath(path);
    if (aborted(o)) throw aborted(o);
    try {
      await this.fs.uploadFile(data, p, TRANSFER_SECONDS);
    } catch (err) {
      throw fromDaytona(err, `writing ${p}`);
    }
  }

  async list(path: string, o: { depth?: number } = {}): Promise<SandboxFileInfo[]> {
    const depth = o.depth ?? 1;
    if (!Number.isInteger(depth) || depth < 1)
      throw new SandboxError("depth must be a positive integer", "INVALID_ARGUMENT");
    const p = virtualPath(path);
    try {
      return (await this.fs.listFiles(p, { depth })).map((e) => fileInfo(p, e));
    } catch (err) {
      throw fromDaytona(err, `listing ${p}`);
    }
  }

  async exists(path: string): Promise<boolean> {
    const p = virtualPath(path);
    try {
      await this.fs.getFileDetails(p);
      return true;
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return false;
      throw fromDaytona(err, `checking ${p}`);
    }
  }

  async mkdir(path: string): Promise<void> {
    const p = virtualPath(path);
    try {
      await this.fs.createFolder(p, "755"); // MkdirAll on the daemon: parents, idempotent
    } catch (err) {
      throw fromDaytona(err, `creating directory ${p}`);
    }
  }

  async remove(path: string): Promise<void> {
    const p = virtualPath(path);
    if (p === VIRTUAL_ROOT)
      throw new SandboxError(`refusing to remove ${VIRTUAL_ROOT} itself`, "INVALID_ARGUMENT");
    try {
      await this.fs.deleteFile(p, true);
    } catch (err) {
      throw fromDaytona(err, `removing ${p}`);
    }
  }

  override async rename(from: string, to: string): Promise<void> {
    const a = virtualPath(from);
    const b = virtualPath(to);
    if (a === VIRTUAL_ROOT)
      throw new SandboxError(`refusing to move ${VIRTUAL_ROOT} itself`, "INVALID_ARGUMENT");
    try {
      await this.fs.moveFiles(a, b);
    } catch (err) {
      throw fromDaytona(err, `renaming ${a} to ${b}`);
    }
  }

  override async stat(path: string): Promise<SandboxFileInfo> {
    const p = virtualPath(path);
    try {
      return fileInfo(posix.dirname(p), { ...(await this.fs.getFileDetails(p)), path: p });
    } catch (err) {
      throw fromDaytona(err, `stat of ${p}`);
    }
  }

  override async append(
    path: string,
    content: string | Uint8Array,
    o: TransferOptions = {},
  ): Promise<void> {
    const data = toBuffer(content);
    const p = virtualPath(path);
    if (aborted(o)) throw aborted(o);
    const part = `${posix.dirname(p)}/.${posix.basename(p)}.${randomUUID()}.append`;
    try {
      await this.fs.uploadFile(data, part, TRANSFER_SECONDS);
    } catch (err) {
      throw fromDaytona(err, `appending to ${p}`);
    }
    const r = await this.host.exec(
      `cat ${shq(part)} >> ${shq(p)}; rc=$?; rm -f ${shq(part)}; exit $rc`,
      {
        cwd: "/",
        timeoutMs: TRANSFER_SECONDS * 1000,
      },
    );
    if (r.exitCode !== 0)
      throw new SandboxError(
        `Daytona: appending to ${p} failed: ${r.stderr.trim()}`,
        /Is a directory/.test(r.stderr) ? "CONFLICT" : "EXECUTION_FAILED",
      );
  }

  override async glob(pattern: string, o: { cwd?: string } = {}): Promise<string[]> {
    checkPattern(pattern, "pattern");
    const { root, relative } = globRoot(pattern, virtualPath(o.cwd ?? this.host.workingDirectory));
    const last = relative.split("/").pop() ?? "*";
    let files: string[];
    try {
      ({ files } = await this.fs.searchFiles(root, last === "**" ? "*" : last));
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return [];
      throw fromDaytona(err, `searching ${root}`);
    }
    return files
      .map((f) => (f.startsWith("/") ? f : posix.join(root, f)))
      .filter((f) => f.startsWith(`${VIRTUAL_ROOT}/`))
      .filter((f) => posix.matchesGlob(posix.relative(root, f), relative))
      .sort();
  }

  override async grep(pattern: string, o: GrepOptions = {}): Promise<GrepMatch[]> {
    checkPattern(pattern, "pattern");
    const plan = grepCommand(pattern, o, this.host.workingDirectory);
    const r = await this.host.exec(plan.command, { cwd: "/", timeoutMs: 5 * 60_000 });
    if (r.exitCode !== 0)
      throw new SandboxError(
        `Daytona: grep failed: ${r.stderr.trim()}`,
        /No such file/.test(r.stderr) ? "NOT_FOUND" : "INVALID_ARGUMENT",
      );
    return parseGrep(r.stdout, plan.max);
  }

  override async readStream(
    path: string,
    o: TransferOptions = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const p = virtualPath(path);
    if (aborted(o)) throw aborted(o);
    let stream: Readable;
    try {
      stream = await this.fs.downloadFileStream(p, {
        timeout: TRANSFER_SECONDS,
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (err) {
      throw aborted(o) ?? fromDaytona(err, `reading ${p}`);
    }
    return Readable.toWeb(stream) as ReadableStream<Uint8Array>;
  }

  /** Streams into a hidden file beside the target, then moves it over the target. */
  override async writeStream(
    path: string,
    data: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    o: TransferOptions = {},
  ): Promise<void> {
    const p = virtualPath(path);
    checkSource(data);
    if (aborted(o)) throw aborted(o);
    const source = data instanceof ReadableStream ? data : Readable.from(data);
    const part = `${posix.dirname(p)}/.${posix.basename(p)}.${randomUUID()}.part`;
    try {
      await this.fs.uploadFileStream(source, part, {
        timeout: TRANSFER_SECONDS,
        ...(o.signal ? { signal: o.signal } : {}),
      });
      await this.fs.moveFiles(part, p);
    } catch (err) {
      await this.fs.deleteFile(part).catch(() => undefined);
      throw aborted(o) ?? fromDaytona(err, `writing ${p}`);
    }
  }
}
