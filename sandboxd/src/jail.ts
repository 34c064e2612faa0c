/**
 * The path jail: every file the API touches is reached through here, and nothing outside the
 * root can be read, written, listed or removed.
 *
 * Node has no openat2(RESOLVE_BENEATH), so containment is enforced in two steps that together
 * close the check-then-use race:
 *  1. the virtual path is normalised lexically and must stay under the virtual root;
 *  2. the object is opened first and only then verified: the real path of the open descriptor
 *     (`/proc/self/fd/N`) must be inside the real root. Whatever a concurrent symlink swap did,
 *     what we verify is exactly what we then use.
 * New files are created inside a directory that was opened and verified the same way, through
 * that directory's `/proc/self/fd/N/` magic link, with O_CREAT|O_EXCL|O_NOFOLLOW, and moved into
 * place by rename(2), which replaces a symlink rather than following it. So a write can never
 * land outside the root, even through a dangling symlink.
 */
import type { Dirent } from "node:fs";
import * as fs from "node:fs/promises";
import { posix } from "node:path";
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  resolveVirtualPath,
  SandboxdError,
  VIRTUAL_ROOT,
  VIRTUAL_WORKSPACE,
  type FileEntry,
  type FileType,
} from "./wire.ts";

// Not an ES import of node:fs: that reads every export, and its lazy getters load some thirty
// more of Node's modules at start (fs.promises' watchers, streams, glob...).
const { constants: C, createReadStream } = process.getBuiltinModule("node:fs");

const MAX_LIST_ENTRIES = 10_000;
/** Names of files being staged (hidden from listings, searches and watches). */
export const UPLOAD_PREFIX = ".sandpit-upload-";

/** A path that passed lexical checks: its virtual form and its components under the root. */
export interface JailPath {
  virtual: string;
  parts: string[];
}

export class PathJail {
  readonly realRoot: string;
  readonly virtualRoot: string;
  readonly defaultDir: string;

  private constructor(realRoot: string, virtualRoot: string, defaultDir: string) {
    this.realRoot = realRoot;
    this.virtualRoot = virtualRoot;
    this.defaultDir = defaultDir;
  }

  /** Creates the root (and the standard sub-directories) if missing and pins its real path. */
  static async open(
    hostRoot: string,
    virtualRoot = VIRTUAL_ROOT,
    defaultDir = VIRTUAL_WORKSPACE,
  ): Promise<PathJail> {
    await fs.mkdir(hostRoot, { recursive: true });
    return new PathJail(await fs.realpath(hostRoot), virtualRoot, defaultDir);
  }

  /** Lexical resolution (see resolveVirtualPath); nothing is opened yet. */
  resolve(input: unknown): JailPath {
    return resolveVirtualPath(input, this.virtualRoot, this.defaultDir);
  }

  /** Host path of a resolved path. Only for building argv/cwd; never opened without verification. */
  hostPath(p: JailPath): string {
    if (p.parts.length === 0) return this.realRoot;
    return `${this.realRoot === "/" ? "" : this.realRoot}/${p.parts.join("/")}`;
  }

  private isInside(real: string): boolean {
    return (
      real === this.realRoot || real.startsWith(this.realRoot === "/" ? "/" : this.realRoot + "/")
    );
  }

  /** Refuses (and closes) a descriptor whose real path left the root. */
  private async verify(fh: fs.FileHandle, p: JailPath): Promise<fs.FileHandle> {
    let real: string;
    try {
      real = await fs.readlink(`/proc/self/fd/${fh.fd}`);
    } catch (err) {
      await fh.close();
      throw err;
    }
    if (!this.isInside(real)) {
      await fh.close();
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `path ${p.virtual} resolves outside ${this.virtualRoot}`,
      );
    }
    return fh;
  }

  /** Opens an existing directory (symlinks followed, result verified). */
  async openDir(p: JailPath): Promise<fs.FileHandle> {
    const fh = await this.guard(p, () => fs.open(this.hostPath(p), C.O_RDONLY | C.O_DIRECTORY));
    return this.verify(fh, p);
  }

  /**
   * Opens a directory, creating missing components one at a time inside verified parents, so
   * `mkdir -p` through a symlink pointing outside stops at the symlink.
   */
  async openDirCreating(p: JailPath): Promise<fs.FileHandle> {
    let dir = await this.openDir({ virtual: this.virtualRoot, parts: [] });
    try {
      for (let i = 0; i < p.parts.length; i++) {
        const step: JailPath = {
          virtual: posix.join(this.virtualRoot, ...p.parts.slice(0, i + 1)),
          parts: p.parts.slice(0, i + 1),
        };
        const next = `/proc/self/fd/${dir.fd}/${p.parts[i]}`;
        await this.guard(step, async () => {
          try {
            await fs.mkdir(next, 0o755);
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
          }
        });
        const child = await this.guard(step, () => fs.open(next, C.O_RDONLY | C.O_DIRECTORY));
        await dir.close();
        dir = await this.verify(child, step);
      }
      return dir;
    } catch (err) {
      await dir.close().catch(() => undefined);
      throw err;
    }
  }

  /** Opens a regular file for reading; FIFOs and devices are refused without blocking. */
  async openFileForRead(p: JailPath): Promise<{ fh: fs.FileHandle; size: number }> {
    const fh = await this.verify(
      await this.guard(p, () => fs.open(this.hostPath(p), C.O_RDONLY | C.O_NONBLOCK | C.O_NOCTTY)),
      p,
    );
    const st = await fh.stat();
    if (!st.isFile()) {
      await fh.close();
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `${p.virtual} is ${st.isDirectory() ? "a directory" : "not a regular file"}`,
      );
    }
    return { fh, size: st.size };
  }

  /**
   * Streams `source` into `p` atomically: the bytes go to a temporary file in the verified parent
   * and are renamed over the target only when the stream ended cleanly. A cut stream leaves the
   * old file (or nothing) in place, never a half-written one.
   */
  async writeFile(p: JailPath, source: Readable | Uint8Array | string): Promise<number> {
    const name = this.leafName(p, "write");
    const dir = await this.openParent(p);
    try {
      const { tmp, size } = await this.stage(dir, p, source);
      await this.guard(p, () => fs.rename(tmp, `/proc/self/fd/${dir.fd}/${name}`)).catch(
        async (err: unknown) => {
          await fs.unlink(tmp).catch(() => undefined);
          throw err;
        },
      );
      return size;
    } finally {
      await dir.close();
    }
  }

  /**
   * Appends to `p`, creating it when missing; returns the bytes appended. All or nothing: a
   * stream is staged in full first (a cut stream appends nothing), then copied onto the end.
   * The target is opened with O_NOFOLLOW inside its verified parent, so a symlink is refused.
   */
  async append(p: JailPath, source: Readable | Uint8Array): Promise<number> {
    const name = this.leafName(p, "append to");
    const dir = await this.openParent(p);
    let staged: { tmp: string; size: number } | undefined;
    try {
      if (!(source instanceof Uint8Array)) staged = await this.stage(dir, p, source);
      const out = await this.guard(p, () =>
        fs.open(
          `/proc/self/fd/${dir.fd}/${name}`,
          C.O_WRONLY | C.O_APPEND | C.O_CREAT | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY,
          0o644,
        ),
      );
      try {
        if (!(await out.stat()).isFile())
          throw new SandboxdError("CONFLICT", `${p.virtual} is not a regular file`);
        if (source instanceof Uint8Array) {
          await this.guard(p, () => out.writeFile(source));
          return source.byteLength;
        }
        const { tmp, size } = staged!;
        // O_APPEND: every write lands at the end, whoever else appends meanwhile.
        await this.guard(p, () =>
          out.writeFile(createReadStream(tmp, { highWaterMark: 1024 * 1024 })),
        );
        return size;
      } finally {
        await out.close().catch(() => undefined);
      }
    } finally {
      if (staged) await fs.unlink(staged.tmp).catch(() => undefined);
      await dir.close();
    }
  }

  /**
   * Moves `from` to `to` as rename(2) does: a file replaces a file, a directory an empty
   * directory; both parents are opened and verified, so neither end can leave the root. Across
   * filesystems (separate mounts under the root) a file is copied and then removed.
   */
  async rename(from: JailPath, to: JailPath): Promise<void> {
    const fromName = this.leafName(from, "move");
    const toName = this.leafName(to, "replace");
    if (to.virtual.startsWith(from.virtual + "/"))
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `cannot move ${from.virtual} into itself (${to.virtual})`,
      );
    const src = await this.openDir(this.parent(from));
    try {
      const dst = await this.openDir(this.parent(to));
      try {
        const a = `/proc/self/fd/${src.fd}/${fromName}`;
        const b = `/proc/self/fd/${dst.fd}/${toName}`;
        const st = await this.guard(from, () => fs.lstat(a));
        await this.guard(to, async () => {
          try {
            await fs.rename(a, b);
          } catch (err) {
            const code = (err as NodeJS.ErrnoException).code;
            // The lexical check above misses a move into itself through a symlink; the kernel's
            // EINVAL catches it.
            if (code === "EINVAL")
              throw new SandboxdError(
                "INVALID_ARGUMENT",
                `cannot move ${from.virtual} into itself (${to.virtual})`,
              );
            if (code !== "EXDEV") throw err;
            if (!st.isFile())
              throw new SandboxdError(
                "CONFLICT",
                `${from.virtual} and ${to.virtual} are on different filesystems; only files move across`,
              );
            const { fh } = await this.openFileForRead(from);
            await this.writeFile(to, fh.createReadStream({ highWaterMark: 1024 * 1024 }));
            await fs.unlink(a);
          }
        });
      } finally {
        await dst.close();
      }
    } finally {
      await src.close();
    }
  }

  private parent(p: JailPath): JailPath {
    return { virtual: posix.dirname(p.virtual), parts: p.parts.slice(0, -1) };
  }

  /** The verified parent directory of `p`, created when missing. */
  private openParent(p: JailPath): Promise<fs.FileHandle> {
    const parent = this.parent(p);
    // Usually the parent exists: one open and one check. Only when it does not, walk and create.
    return this.openDir(parent).catch((err: unknown) => {
      if (err instanceof SandboxdError && err.code === "NOT_FOUND")
        return this.openDirCreating(parent);
      throw err;
    });
  }

  /**
   * Writes `source` to a fresh temporary file in `dir` (hidden from listings); a failure or a
   * cut stream removes it again.
   */
  private async stage(
    dir: fs.FileHandle,
    p: JailPath,
    source: Readable | Uint8Array | string,
  ): Promise<{ tmp: string; size: number }> {
    const tmp = `/proc/self/fd/${dir.fd}/${UPLOAD_PREFIX}${randomBytes(8).toString("hex")}`;
    try {
      const out = await this.guard(p, () =>
        fs.open(tmp, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o644),
      );
      let size = 0;
      try {
        if (typeof source === "string" || source instanceof Uint8Array) {
          const buf = typeof source === "string" ? Buffer.from(source) : source;
          await out.writeFile(buf);
          size = buf.byteLength;
        } else {
          // The write stream owns (and closes) the descriptor once the pipeline settles.
          const sink = out.createWriteStream({ highWaterMark: 1024 * 1024 });
          source.on("data", (chunk: Buffer) => (size += chunk.length));
          await pipeline(source, sink);
        }
      } finally {
        await out.close().catch(() => undefined);
      }
      return { tmp, size };
    } catch (err) {
      await fs.unlink(tmp).catch(() => undefined);
      // A full disk is the caller's to hear about in words; a client's cut stream stays what
      // it is (server.ts reports it as the client's abort).
      throw isOutOfSpace(err) ? toSandboxdError(err, p.virtual) : err;
    }
  }

  /** Describes the path itself (a symlink is reported as a symlink, not followed). */
  async stat(p: JailPath): Promise<FileEntry> {
    if (p.parts.length === 0) return this.entryAt(this.realRoot, p.virtual);
    const dir = await this.openDir({
      virtual: posix.dirname(p.virtual),
      parts: p.parts.slice(0, -1),
    });
    try {
      return await this.guard(p, () =>
        this.entryAt(`/proc/self/fd/${dir.fd}/${p.parts.at(-1)}`, p.virtual),
      );
    } finally {
      await dir.close();
    }
  }

  /** Lists a directory to `depth` levels (1 = direct children); symlinks are not descended. */
  async list(p: JailPath, depth: number): Promise<{ entries: FileEntry[]; truncated: boolean }> {
    const entries: FileEntry[] = [];
    const dir = await this.openDir(p);
    try {
      // Each level is read through a descriptor opened with O_NOFOLLOW relative to its verified
      // parent, so a directory swapped for a symlink mid-walk cannot lead the listing outside.
      const walk = async (
        dirFh: fs.FileHandle,
        virtualDir: string,
        level: number,
      ): Promise<boolean> => {
        const hostDir = `/proc/self/fd/${dirFh.fd}`;
        let children: Dirent[];
        try {
          children = await fs.readdir(hostDir, { withFileTypes: true });
        } catch (err) {
          if (level > 1) return true; // a sub-directory removed mid-walk is simply skipped
          throw err;
        }
        children.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
        for (const child of children) {
          if (child.name.startsWith(UPLOAD_PREFIX)) continue;
          if (entries.length >= MAX_LIST_ENTRIES) return false;
          const entry = await this.entryAt(
            `${hostDir}/${child.name}`,
            posix.join(virtualDir, child.name),
          ).catch(() => null);
          if (!entry) continue;
          entries.push(entry);
          if (entry.type !== "dir" || level >= depth) continue;
          const sub = await fs
            .open(`${hostDir}/${child.name}`, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW)
            .catch(() => null);
          if (!sub) continue;
          try {
            if (!(await walk(sub, entry.path, level + 1))) return false;
          } finally {
            await sub.close();
          }
        }
        return true;
      };
      const complete = await this.guard(p, () => walk(dir, p.virtual, 1));
      return { entries, truncated: !complete };
    } finally {
      await dir.close();
    }
  }

  async mkdir(p: JailPath): Promise<void> {
    const dir = await this.openDirCreating(p);
    await dir.close();
  }

  async remove(p: JailPath, recursive: boolean): Promise<void> {
    const name = this.leafName(p, "remove");
    const dir = await this.openDir({
      virtual: posix.dirname(p.virtual),
      parts: p.parts.slice(0, -1),
    });
    try {
      const target = `/proc/self/fd/${dir.fd}/${name}`;
      await this.guard(p, async () => {
        const st = await fs.lstat(target);
        if (!st.isDirectory()) return fs.unlink(target);
        if (recursive) await removeTree(target);
        return fs.rmdir(target);
      });
    } finally {
      await dir.close();
    }
  }

  private leafName(p: JailPath, verb: string): string {
    const name = p.parts.at(-1);
    if (!name)
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `cannot ${verb} the sandbox root ${this.virtualRoot}`,
      );
    return name;
  }

  private async entryAt(hostPath: string, virtual: string): Promise<FileEntry> {
    const st = await fs.lstat(hostPath);
    const type: FileType = st.isFile()
      ? "file"
      : st.isDirectory()
        ? "dir"
        : st.isSymbolicLink()
          ? "symlink"
          : "other";
    return {
      name: posix.basename(virtual),
      path: virtual,
      type,
      size: st.size,
      modifiedMs: Math.floor(st.mtimeMs),
      mode: st.mode & 0o7777,
    };
  }

  /** Runs a filesystem call and turns errno failures into errors that name the virtual path only. */
  private async guard<T>(p: JailPath, op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      throw toSandboxdError(err, p.virtual);
    }
  }
}

/**
 * Empties a directory without ever following a symlink: each level is opened with O_NOFOLLOW
 * relative to its parent's descriptor and entries are unlinked by name inside it. (fs.rm walks by
 * path strings, so a directory swapped for a symlink mid-walk would lead it outside the root.)
 */
async function removeTree(dirPath: string): Promise<void> {
  let dir: fs.FileHandle;
  try {
    dir = await fs.open(dirPath, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
  } catch (err) {
    if (
      (err as NodeJS.ErrnoException).code === "ELOOP" ||
      (err as NodeJS.ErrnoException).code === "ENOTDIR"
    )
      return;
    throw err;
  }
  try {
    const base = `/proc/self/fd/${dir.fd}`;
    for (const name of await fs.readdir(base)) {
      const child = `${base}/${name}`;
      const st = await fs.lstat(child).catch(() => null);
      if (!st) continue;
      if (st.isDirectory()) {
        await removeTree(child);
        await fs.rmdir(child);
      } else {
        await fs.unlink(child);
      }
    }
  } finally {
    await dir.close();
  }
}

/** A write that failed because the volume (or its quota) is full. */
export function isOutOfSpace(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}

/** Maps an errno failure onto an API error; host paths never appear in the message. */
export function toSandboxdError(err: unknown, virtual: string): Error {
  if (err instanceof SandboxdError) return err;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  switch (code) {
    case "ENOENT":
      return new SandboxdError("NOT_FOUND", `${virtual} does not exist`, { cause: err });
    case "ENOTDIR":
      return new SandboxdError("CONFLICT", `a component of ${virtual} is not a directory`, {
        cause: err,
      });
    case "EISDIR":
      return new SandboxdError("CONFLICT", `${virtual} is a directory`, { cause: err });
    case "EEXIST":
      return new SandboxdError("CONFLICT", `${virtual} already exists`, { cause: err });
    case "ENOTEMPTY":
      return new SandboxdError(
        "CONFLICT",
        `${virtual} is a non-empty directory (remove it recursively)`,
        { cause: err },
      );
    case "ELOOP":
      return new SandboxdError(
        "INVALID_ARGUMENT",
        `${virtual} is a symlink loop or a symlink where none is allowed`,
        { cause: err },
      );
    case "ENAMETOOLONG":
      return new SandboxdError("INVALID_ARGUMENT", `${virtual} is too long`, { cause: err });
    case "EACCES":
    case "EPERM":
      return new SandboxdError("INVALID_ARGUMENT", `permission denied: ${virtual}`, { cause: err });
    case "ENOSPC":
    case "EDQUOT":
      return new SandboxdError(
        "CAPACITY_EXCEEDED",
        `the sandbox's disk is full: no space left while writing ${virtual}`,
        { cause: err },
      );
    default:
      return new SandboxdError(
        "INTERNAL",
        `file operation on ${virtual} failed (${code ?? "unknown error"})`,
        { cause: err },
      );
  }
}
