/**
 * A local sandbox's sandboxd outlives the process that started it (as a container outlives
 * `docker run`), so any later process can reach it again. What that process needs is the run
 * file, `sandboxd.json` beside the sandbox's record: the socket, the token and the process to
 * signal. It is mode 0600 and lives outside `user-data`, the only sandbox directory bubblewrap
 * mounts, so code in the sandbox never sees the token.
 *
 * A pid alone could name an unrelated process after a reboot or wrap-around, so the run file
 * also keeps the process's start time, and nothing is attached to or signalled unless both match.
 * Small files are read and written synchronously, as the record is (see ./records.ts).
 */
import { execFile } from "node:child_process";
import * as fs from "node:fs/promises";
import { readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const RUN_FILE = "sandboxd.json";
const LOCK_FILE = "sandboxd.lock";

export interface RunRecord {
  /** The process the provider spawned: sandboxd itself, or the outer bubblewrap. */
  pid: number;
  /** That process's start time, as the OS reports it. */
  startTime: string;
  isolation: "bwrap" | "none";
  socketPath: string;
  token: string;
}

export async function readRun(dir: string): Promise<RunRecord | null> {
  try {
    return JSON.parse(readFileSync(join(dir, RUN_FILE), "utf8")) as RunRecord;
  } catch {
    // Absent, or cut short by a crash mid-write: either way there is nothing to reach.
    return null;
  }
}

/** Created 0600 under a temporary name, then renamed: never readable by others, never half. */
export async function writeRun(dir: string, record: RunRecord): Promise<void> {
  const tmp = join(dir, `.${RUN_FILE}.${process.pid}`);
  rmSync(tmp, { force: true });
  writeFileSync(tmp, JSON.stringify(record), { mode: 0o600, flag: "wx" });
  renameSync(tmp, join(dir, RUN_FILE));
}

export async function removeRun(dir: string): Promise<void> {
  rmSync(join(dir, RUN_FILE), { force: true });
}

/**
 * When `pid` started, or null when no such process runs (a zombie counts as gone). Linux:
 * `/proc/<pid>/stat`'s starttime; elsewhere `ps -o lstart=`.
 */
export async function startTimeOf(pid: number): Promise<string | null> {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may itself hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z" || fields[0] === "X") return null;
    return fields[19] ?? null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" && (await hasProc())) return null;
  }
  const out = await run("ps", ["-o", "lstart=", "-p", String(pid)]).catch(() => null);
  return out?.stdout.trim() || null;
}

let procMounted: Promise<boolean> | null = null;
function hasProc(): Promise<boolean> {
  procMounted ??= fs.access("/proc/self/stat").then(
    () => true,
    () => false,
  );
  return procMounted;
}

/** The run file still names the very process that was started. */
export async function isAlive(record: RunRecord): Promise<boolean> {
  return (await startTimeOf(record.pid)) === record.startTime;
}

async function childrenOf(pid: number): Promise<number[]> {
  const text = await fs.readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
  return text.split(" ").filter(Boolean).map(Number);
}

function signal(pid: number | undefined, sig: NodeJS.Signals): void {
  if (!pid) return;
  try {
    process.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

async function gone(record: RunRecord, withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  for (;;) {
    if (!(await isAlive(record))) return true;
    if (Date.now() >= until) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Stops a sandboxd from any process: SIGTERM to sandboxd, which kills the process groups it
 * started and exits; if it has not within 3 s, SIGKILL. Under bubblewrap sandboxd is the
 * grandchild of the spawned process (outer bwrap → the namespace's init → sandboxd), and SIGKILL
 * goes to that init: the kernel then kills every process of the sandbox's PID namespace.
 */
export async function stopDetached(record: RunRecord): Promise<void> {
  if (!(await isAlive(record))) return;
  let init: number | undefined;
  let daemon: number | undefined = record.pid;
  if (record.isolation === "bwrap") {
    [init] = await childrenOf(record.pid);
    [daemon] = init ? await childrenOf(init) : [];
  }
  if (!(await isAlive(record))) return;
  signal(daemon, "SIGTERM");
  if (await gone(record, 3_000)) return;
  signal(init ?? record.pid, "SIGKILL");
  if (init) signal(record.pid, "SIGKILL");
  await gone(record, 3_000);
}

/** This process's own start time, for its lock files: read once. */
let myStartTime: Promise<string | null> | undefined;

/**
 * Runs `fn` holding the sandbox's start lock, so two processes resuming the same stopped sandbox
 * start one sandboxd between them. A lock whose holder died is taken over.
 */
export async function withStartLock<T>(
  dir: string,
  waitMs: number,
  fn: () => Promise<T>,
): Promise<T> {
  const path = join(dir, LOCK_FILE);
  const until = Date.now() + waitMs;
  myStartTime ??= startTimeOf(process.pid);
  const me = JSON.stringify({ pid: process.pid, startTime: await myStartTime });
  for (;;) {
    try {
      writeFileSync(path, me, { flag: "wx", mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = await fs
      .readFile(path, "utf8")
      .then((t) => JSON.parse(t) as { pid: number; startTime: string | null })
      .catch(() => null);
    if (holder && (await startTimeOf(holder.pid)) !== holder.startTime) {
      rmSync(path, { force: true });
      continue;
    }
    if (Date.now() >= until) break; // A stuck holder: go ahead rather than hang.
    await new Promise((r) => setTimeout(r, 25));
  }
  try {
    return await fn();
  } finally {
    rmSync(path, { force: true });
  }
}
