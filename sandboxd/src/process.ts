/**
 * Runs one child process to completion with bounded memory: each output stream is captured up to
 * a cap (the rest is drained and dropped, and the result says so), the deadline kills the whole
 * process group, and chunks can be streamed to the caller as they arrive.
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { constants } from "node:os";
import { StringDecoder } from "node:string_decoder";
import type { RunCommandResult } from "./protocol.ts";

export interface ProcessSpec {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  stdin?: string | undefined;
  timeoutMs: number;
  outputCapBytes: number;
  /** Called with each decoded chunk kept under the cap, and its byte offset in its stream. */
  onChunk?: ((stream: "stdout" | "stderr", data: string, offset: number) => void) | undefined;
  /** Aborting kills the process group, as a timeout does (the caller went away). */
  signal?: AbortSignal | undefined;
}

/**
 * After the main process exits, wait this long for its output pipes to close. A background job
 * it started (`server &`) may hold them open for ever; it keeps running, we stop listening.
 */
export const PIPE_GRACE_MS = 100;

/**
 * After the main process exited, calls `finish` once its pipes have had PIPE_GRACE_MS to close
 * (the caller also finishes on 'close'). The grace is never cut short by a starved event loop:
 * a timer runs before the poll that reads the pipes in each turn of the loop, so a loop that
 * was busy (or CPU-throttled) past the grace would fire it with output the command wrote before
 * exiting still unread in the pipe. When it fires, one more poll reads what the pipes hold
 * (setImmediate runs after it); if that brought output, the grace starts again, for at most
 * PIPE_DRAIN_MAX_MS after the exit: a background job that keeps writing is not waited for.
 * `bytes` counts the output received so far.
 */
export function finishAfterExit(bytes: () => number, finish: () => void): void {
  const exited = performance.now();
  const grace = () => {
    const before = bytes();
    setImmediate(() => {
      if (bytes() !== before && performance.now() - exited < PIPE_DRAIN_MAX_MS)
        setTimeout(grace, PIPE_GRACE_MS).unref();
      else finish();
    }).unref();
  };
  setTimeout(grace, PIPE_GRACE_MS).unref();
}

/** How long after the exit output still arriving on the pipes is waited for, at most. */
export const PIPE_DRAIN_MAX_MS = 2_000;

/** Every session this process started (a detached child leads its own session). */
const sessions = new Set<number>();

/**
 * Kills every process still in a session we started: background jobs outlive the command that
 * started them, but not sandboxd. (Inside bubblewrap the PID namespace does this by itself.)
 */
export async function killStartedSessions(): Promise<number> {
  if (sessions.size === 0) return 0;
  const killed = await killSessions(sessions);
  sessions.clear();
  return killed;
}

/** Counts a session started elsewhere (a terminal's, by node-pty) among those killed at exit. */
export function trackSession(sid: number): void {
  sessions.add(sid);
}

/** SIGKILLs every process whose session is in `sids`: a process group is not enough for a
 * terminal, whose shell puts each job in a group of its own. */
export async function killSessions(sids: ReadonlySet<number>): Promise<number> {
  let killed = 0;
  for (const name of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, "utf8").catch(() => "");
    // Fields after the parenthesised command name: state ppid pgrp session ...
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (sids.has(Number(fields[3]))) {
      try {
        process.kill(Number(name), "SIGKILL");
        killed++;
      } catch {
        // already gone
      }
    }
  }
  return killed;
}

/**
 * An output stream's byte count and cap: every chunk is counted, the part that fits under the cap
 * is handed back to keep, and the rest is dropped and flagged.
 */
export class OutputCap {
  kept = 0;
  seen = 0;
  truncated = false;
  private readonly cap: number;

  constructor(cap: number) {
    this.cap = cap;
  }

  /** The part of `chunk` to keep, or undefined when the cap is already reached. */
  protected take(chunk: Buffer): Buffer | undefined {
    this.seen += chunk.length;
    const room = this.cap - this.kept;
    if (room <= 0) {
      this.truncated = true;
      return undefined;
    }
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    if (part.length < chunk.length) this.truncated = true;
    this.kept += part.length;
    return part;
  }
}

class CappedStream extends OutputCap {
  readonly chunks: Buffer[] = [];
  private readonly decoder = new StringDecoder("utf8");
  private readonly name: "stdout" | "stderr";
  private readonly onChunk: ProcessSpec["onChunk"];

  constructor(name: "stdout" | "stderr", cap: number, onChunk: ProcessSpec["onChunk"]) {
    super(cap);
    this.name = name;
    this.onChunk = onChunk;
  }

  push(chunk: Buffer): void {
    const offset = this.seen;
    const part = this.take(chunk);
    if (!part) return;
    if (this.onChunk) {
      const text = this.decoder.write(part);
      if (text) this.onChunk(this.name, text, offset);
    } else {
      this.chunks.push(part);
    }
  }

  text(): string {
    if (this.onChunk) {
      const rest = this.decoder.end();
      if (rest) this.onChunk(this.name, rest, this.kept);
      return "";
    }
    return Buffer.concat(this.chunks).toString("utf8");
  }
}

/**
 * Starts a child leading its own session and process group, so a timeout can kill everything it
 * started, and sandboxd's exit takes what is left with it (killStartedSessions).
 */
export function spawnDetached(
  file: string,
  args: string[],
  o: {
    cwd: string;
    env: Record<string, string>;
    /** More pipes, as fds 3, 4, ... of the child (a private channel; see contexts.ts). */
    extraPipes?: number;
  },
): ChildProcessWithoutNullStreams {
  // node:child_process is loaded by the first process, not at start (most of a hundred modules).
  const { spawn } = process.getBuiltinModule("node:child_process");
  const child = spawn(file, args, {
    cwd: o.cwd,
    env: o.env,
    detached: true,
    stdio: ["pipe", "pipe", "pipe", ...Array<"pipe">(o.extraPipes ?? 0).fill("pipe")],
  });
  if (child.pid !== undefined) {
    sessions.add(child.pid);
    // Under a memory limit the kernel should kill the command, not sandboxd: raising a
    // child's OOM score needs no privilege, and its own children inherit it.
    void writeFile(`/proc/${child.pid}/oom_score_adj`, "1000").catch(() => undefined);
  }
  return child;
}

/** Sends `signal` to every process in group `pgid`, except `spare` (a shell to keep alive). */
export async function signalGroup(
  pgid: number,
  signal: NodeJS.Signals,
  spare?: number,
): Promise<void> {
  if (spare === undefined) {
    try {
      process.kill(-pgid, signal);
    } catch {
      // the group is already gone
    }
    return;
  }
  for (const name of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(name) || Number(name) === spare) continue;
    const stat = await readFile(`/proc/${name}/stat`, "utf8").catch(() => "");
    // Fields after the parenthesised command name: state ppid pgrp ...
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) !== pgid) continue;
    try {
      process.kill(Number(name), signal);
    } catch {
      // gone meanwhile
    }
  }
}

export function runProcess(spec: ProcessSpec): Promise<RunCommandResult> {
  return superviseProcess(
    spawnDetached(spec.file, spec.args, { cwd: spec.cwd, env: spec.env }),
    spec,
  );
}

/**
 * Runs `child` (started by spawnDetached, now or ahead of time: spare-runner.ts) to completion
 * as runProcess does: its stdin gets `spec.stdin` and is closed, and the deadline and duration
 * count from this call.
 */
export function superviseProcess(
  child: ChildProcessWithoutNullStreams,
  spec: Omit<ProcessSpec, "file" | "args" | "cwd" | "env">,
): Promise<RunCommandResult> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const out = new CappedStream("stdout", spec.outputCapBytes, spec.onChunk);
    const err = new CappedStream("stderr", spec.outputCapBytes, spec.onChunk);
    let timedOut = false;
    let exitCode: number | null = null;
    let settled = false;

    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // the group is already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, spec.timeoutMs);
    const onAbort = () => killGroup();
    spec.signal?.addEventListener("abort", onAbort, { once: true });

    child.stdout.on("data", (c: Buffer) => out.push(c));
    child.stderr.on("data", (c: Buffer) => err.push(c));
    child.stdin.on("error", () => undefined); // the command may exit without reading its stdin
    child.stdin.end(spec.stdin ?? "");

    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      spec.signal?.removeEventListener("abort", onAbort);
      child.stdout.destroy();
      child.stderr.destroy();
      resolve({
        // 128 + signal number is what a shell reports for a killed command.
        exitCode: exitCode ?? 137,
        stdout: out.text(),
        stderr: err.text(),
        durationMs: Math.round(performance.now() - started),
        timedOut,
        truncated: out.truncated || err.truncated,
      });
    };
    child.on("error", (e) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(e);
    });
    child.on("exit", (code, signal) => {
      exitCode = code ?? (signal ? 128 + constants.signals[signal] : 1);
      if (timedOut) killGroup();
      finishAfterExit(() => out.seen + err.seen, finish);
    });
    child.on("close", finish);
  });
}
