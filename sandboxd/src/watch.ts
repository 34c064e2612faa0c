/**
 * Watching a directory: fs.watch (inotify; `recursive` is native on Linux since Node 20) turned
 * into create/write/remove/rename events with absolute virtual paths.
 *
 * fs.watch only says "rename" (something appeared or went) or "change" (contents), so each
 * changed path is looked up through the jail when a short burst window closes: it exists and was
 * not known → create; known and changed → write; known and gone → remove, or rename when a path
 * that appeared in the same burst looks the same (type, size, mtime: a move keeps them), as
 * fsnotify reports a move (rename on the old path, create on the new). A path that came and went
 * within one window is still reported (create, then remove), and a directory that appears under
 * a recursive watch is listed, so files made in it before its own watch was set are not missed.
 */
import type { FSWatcher } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { posix } from "node:path";
import { UPLOAD_PREFIX, type JailPath, type PathJail } from "./jail.ts";
import { SandboxdError, type FileEntry } from "./wire.ts";

// Not an ES import of node:fs (see jail.ts).
const { watch } = process.getBuiltinModule("node:fs");

/** Concurrent watches per sandbox: each holds inotify watches, a kernel-wide resource. */
export const MAX_WATCHERS = 32;
/** Changes within this window are coalesced (a burst of writes to one file is one event). */
const BURST_MS = 50;
/** Paths remembered as existing; beyond it new paths still report create, just less precisely. */
const MAX_KNOWN = 100_000;
const MAX_DEPTH = 32;

export type WatchEvent = { type: "create" | "write" | "remove" | "rename"; path: string };
/** An event, or a known path found gone (remove or rename, decided once the window is read). */
type Outcome = WatchEvent | { gone: string; sig: string };

export class WatchLimit {
  private active = 0;
  private readonly limit: number;
  constructor(limit = MAX_WATCHERS) {
    this.limit = limit;
  }
  /** Takes a slot, or refuses with CAPACITY_EXCEEDED; returns its release. */
  acquire(): () => void {
    if (this.active >= this.limit)
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `at most ${this.limit} watches may be open at once; stop one first`,
      );
    this.active++;
    let released = false;
    return () => {
      if (!released) this.active--;
      released = true;
    };
  }
}

/** The fs.watch events seen for one path within a burst window. */
interface Seen {
  renamed: boolean;
  changed: boolean;
}

/** Identity of a path's object as far as a move preserves it. */
const signature = (e: FileEntry) => `${e.type}:${e.size}:${e.modifiedMs}`;

export interface DirectoryWatch {
  close(): void;
}

/**
 * Starts watching `dir` (which must be a directory); events go to `emit` in order, a failure of
 * the watch to `fail` (after which nothing more is emitted). Resolves once the watch is active.
 */
export async function watchDirectory(
  jail: PathJail,
  dir: JailPath,
  recursive: boolean,
  emit: (event: WatchEvent) => void,
  fail: (err: unknown) => void,
): Promise<DirectoryWatch> {
  // The verified descriptor pins the directory: the watch is set on what was checked, not on
  // whatever the path names later.
  const fh: FileHandle = await jail.openDir(dir);
  const known = new Map<string, string>();
  const remember = (e: FileEntry) => {
    if (known.size < MAX_KNOWN || known.has(e.path)) known.set(e.path, signature(e));
  };
  let watcher: FSWatcher;
  try {
    for (const e of (await jail.list(dir, recursive ? MAX_DEPTH : 1)).entries) remember(e);
    watcher = watch(`/proc/self/fd/${fh.fd}`, { recursive, persistent: false });
  } catch (err) {
    await fh.close();
    throw err;
  }

  let closed = false;
  /** Relative path → which fs events were seen for it in this window. */
  let pending = new Map<string, Seen>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();

  const lookup = (virtual: string): Promise<FileEntry | null> =>
    jail.stat(jail.resolve(virtual)).catch(() => null);

  const flush = async (batch: Map<string, Seen>) => {
    const appeared: { path: string; sig: string }[] = [];
    const out: Outcome[] = [];
    for (const [rel, { renamed: sawRename, changed }] of batch) {
      const path = posix.join(dir.virtual, rel);
      const entry = await lookup(path);
      if (closed) return;
      const before = known.get(path);
      if (entry) {
        const sig = signature(entry);
        if (before === undefined) {
          remember(entry);
          out.push({ type: sawRename ? "create" : "write", path });
          // Made and then written within one window: both happened (fsnotify says both).
          if (sawRename && changed && entry.type === "file") out.push({ type: "write", path });
          if (sawRename) appeared.push({ path, sig });
          if (recursive && entry.type === "dir") await listNew(entry, out);
        } else if (before !== sig || !sawRename) {
          remember(entry);
          if (entry.type !== "dir") out.push({ type: "write", path });
        }
      } else if (before !== undefined) {
        // Written, then gone within one window: the write still happened (fsnotify says both).
        if (changed && before.startsWith("file:")) out.push({ type: "write", path });
        known.delete(path);
        for (const sub of known.keys()) if (sub.startsWith(path + "/")) known.delete(sub); // a removed directory's contents
        out.push({ gone: path, sig: before });
      } else if (sawRename) {
        // Came and went within one window; a write in between happened too (fsnotify says all three).
        out.push({ type: "create", path });
        if (changed) out.push({ type: "write", path });
        out.push({ type: "remove", path });
      }
    }
    for (const e of out) {
      if (closed) return;
      if ("type" in e) {
        emit(e);
        continue;
      }
      const moved = appeared.findIndex((a) => a.sig === e.sig);
      if (moved >= 0) appeared.splice(moved, 1);
      emit({ type: moved >= 0 ? "rename" : "remove", path: e.gone });
    }
  };

  /** Entries of a directory that just appeared which no event named yet. */
  const listNew = async (entry: FileEntry, out: Outcome[]) => {
    const listed = await jail.list(jail.resolve(entry.path), MAX_DEPTH).catch(() => null);
    for (const e of listed?.entries ?? []) {
      if (known.has(e.path)) continue;
      remember(e);
      out.push({ type: "create", path: e.path });
    }
  };

  const schedule = () => {
    if (timer || closed) return;
    timer = setTimeout(() => {
      timer = undefined;
      const batch = pending;
      pending = new Map();
      flushing = flushing.then(() => flush(batch)).catch((err: unknown) => stop(err));
    }, BURST_MS);
  };

  watcher.on("change", (type, name) => {
    if (closed || typeof name !== "string" || posix.basename(name).startsWith(UPLOAD_PREFIX))
      return;
    const seen = pending.get(name) ?? { renamed: false, changed: false };
    if (type === "rename") seen.renamed = true;
    else seen.changed = true;
    pending.set(name, seen);
    schedule();
  });
  watcher.on("error", (err) => stop(err));

  const stop = (err?: unknown) => {
    if (closed) return;
    closed = true;
    clearTimeout(timer);
    watcher.close();
    void fh.close().catch(() => undefined);
    if (err !== undefined) fail(err);
  };
  return { close: () => stop() };
}
