/**
 * A cross-process lock file with a bounded wait, for work that two vitest workers (or two CLI
 * runs) may start at once: building the sandbox image, starting dockerd. The file holds the
 * owner's PID so a lock left by a crashed process is recognised and taken over.
 */
import { link, mkdir, open, readFile, rename, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import { randomBytes } from "node:crypto";

export interface LockOptions {
  /** Give up waiting after this long. */
  timeoutMs: number;
  /** What the lock protects, for the timeout message ("sandbox image build"). */
  what: string;
  log?: ((line: string) => void) | undefined;
}

const POLL_MS = 250;

/** Runs `fn` while holding the lock at `path`; waits (bounded) while another live process holds it. */
export async function withLock<T>(path: string, o: LockOptions, fn: () => Promise<T>): Promise<T> {
  await acquire(path, o);
  try {
    return await fn();
  } finally {
    await release(path);
  }
}

async function acquire(path: string, o: LockOptions): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const deadline = Date.now() + o.timeoutMs;
  let announced = false;
  // Bounded by `deadline`: every pass either takes the lock, breaks a dead owner's, or sleeps.
  for (;;) {
    try {
      const fh = await open(path, "wx", 0o644);
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const owner = await readOwner(path);
    if (owner !== null && owner !== process.pid && !isAlive(owner)) {
      await breakStale(path, owner);
      continue;
    }
    if (Date.now() >= deadline) {
      throw new Error(
        `timed out after ${Math.round(o.timeoutMs / 1000)} s waiting for the ${o.what} lock ${path} (held by pid ${owner ?? "unknown"})`,
      );
    }
    if (!announced) {
      o.log?.(`waiting for the ${o.what} lock held by pid ${owner ?? "unknown"} (${path})`);
      announced = true;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function release(path: string): Promise<void> {
  // Only remove the lock if it is still ours (it may have been broken as stale by mistake).
  if ((await readOwner(path)) === process.pid) await unlink(path).catch(() => undefined);
}

async function readOwner(path: string): Promise<number | null> {
  try {
    const pid = Number.parseInt(await readFile(path, "utf8"), 10);
    return Number.isFinite(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to someone else, so it is alive.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Two waiters may both see the same dead owner. Unlinking directly could then delete a lock the
 * faster one has just taken, so the file is first moved aside atomically and checked: if it turns
 * out to be a live lock, it is put back (link fails only if a third process took the lock since).
 */
async function breakStale(path: string, deadPid: number): Promise<void> {
  const aside = `${path}.stale-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    await rename(path, aside);
  } catch {
    return; // someone else moved it first
  }
  const owner = await readOwner(aside);
  if (owner !== null && owner !== deadPid && isAlive(owner))
    await link(aside, path).catch(() => undefined);
  await unlink(aside).catch(() => undefined);
}
