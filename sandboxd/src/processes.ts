/**
 * Background processes: commands started now and reached later by pid. Each runs as a one-shot
 * command does (`/bin/sh -c`, the sandbox's environment and user, a working directory inside the
 * root, its own session and process group) but outlives the request that started it and every
 * client that attaches to it. Its combined output is kept in a bounded ring (OutputRing) for
 * readers that attach late; its stdin stays open until closed.
 *
 * Bounds: live processes (`maxProcesses`, the next start is CAPACITY_EXCEEDED), output per process
 * and in total (the oldest output goes first, of exited processes before running ones), stdin a
 * process leaves unread, and exited processes kept for their exit code (EXITED_KEPT, EXITED_KEEP_MS).
 * Nothing here stops a process when a client goes away: only a signal, its timeout, or sandboxd
 * stopping (shutdown, or the container or pod going) does.
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { constants } from "node:os";
import { StringDecoder } from "node:string_decoder";
import type { Executor } from "./executor.ts";
import { OutputRing, type OutputChunk } from "./output-ring.ts";
import { finishAfterExit, spawnDetached } from "./process.ts";
import {
  MAX_STDIN_BYTES,
  SandboxdError,
  type ProcessEntry,
  type ProcessExit,
  type ProcessSignalName,
} from "./wire.ts";
import type { StartProcessRequest } from "./protocol.ts";

/** Exited processes kept listed (with their output) for clients that come back for the exit code. */
const EXITED_KEPT = 100;
const EXITED_KEEP_MS = 10 * 60_000;

export interface ProcessTableOptions {
  executor: Executor;
  /** Processes running at once. */
  maxProcesses: number;
  /** Output kept per process. */
  outputBytes: number;
  /** Output kept for all processes together. */
  outputTotalBytes: number;
}

/** One background process: what `list` shows, its output ring, and who listens to it. */
export class BackgroundProcess {
  readonly pid: number;
  readonly command: string;
  readonly cwd: string;
  readonly tag: string | undefined;
  readonly startedAt = Date.now();
  readonly ring: OutputRing;
  /** Set once the process has exited and its output is complete. */
  exit: ProcessExit | undefined;
  exitedAt = 0;
  /** Called after new output and after the exit: attached readers pull from the ring. */
  readonly listeners = new Set<() => void>();
  readonly child: ChildProcessWithoutNullStreams;

  constructor(
    child: ChildProcessWithoutNullStreams,
    o: { command: string; cwd: string; tag: string | undefined; outputBytes: number },
  ) {
    this.child = child;
    this.pid = child.pid!;
    this.command = o.command;
    this.cwd = o.cwd;
    this.tag = o.tag;
    this.ring = new OutputRing(o.outputBytes);
  }

  entry(): ProcessEntry {
    return {
      pid: this.pid,
      command: this.command,
      cwd: this.cwd,
      ...(this.tag === undefined ? {} : { tag: this.tag }),
      pty: false,
      startedAtMs: this.startedAt,
      ...(this.exit ? { exitCode: this.exit.exitCode } : {}),
    };
  }

  get stdinOpen(): boolean {
    return this.child.stdin.writable;
  }

  notify(): void {
    for (const listener of this.listeners) listener();
  }
}

export class ProcessTable {
  private readonly opts: ProcessTableOptions;
  /** Running and kept exited processes, by pid, in start order. */
  private readonly all = new Map<number, BackgroundProcess>();
  private running = 0;
  /** Output held by all rings. */
  private held = 0;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(opts: ProcessTableOptions) {
    this.opts = opts;
  }

  async start(req: StartProcessRequest): Promise<BackgroundProcess> {
    const { executor } = this.opts;
    const cwd = await executor.existingDir(req.cwd);
    await executor.interpreters(); // the python/node links commands expect are in place
    // Counted after the awaits, right before spawning: concurrent starts cannot overshoot.
    if (this.running >= this.opts.maxProcesses) {
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `at most ${this.opts.maxProcesses} background processes may run at once in this sandbox ` +
          "(SANDBOXD_MAX_PROCESSES): kill one or wait for one to exit",
      );
    }
    const child = spawnDetached("/bin/sh", ["-c", executor.localise(req.command)], {
      cwd: executor.inSandbox(cwd),
      env: executor.processEnv(req.env),
    });
    if (child.pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once("error", resolve));
      throw new SandboxdError("EXECUTION_FAILED", `could not start /bin/sh: ${err.message}`);
    }
    const proc = new BackgroundProcess(child, {
      command: req.command,
      cwd: cwd.virtual,
      tag: req.tag,
      outputBytes: this.opts.outputBytes,
    });
    this.prune();
    this.all.set(proc.pid, proc);
    this.running++;
    this.watch(proc, req.timeoutMs);
    child.stdin.on("error", () => undefined); // the process may exit without reading its stdin
    if (req.stdin) child.stdin.write(req.stdin);
    return proc;
  }

  /** Running processes and kept exited ones, oldest first. */
  /** Whether a background process is running (for the idle measure). */
  get active(): boolean {
    return this.running > 0;
  }

  list(): BackgroundProcess[] {
    this.prune();
    return [...this.all.values()];
  }

  get(pid: number): BackgroundProcess {
    this.prune();
    const proc = this.all.get(pid);
    if (!proc) throw new SandboxdError("NOT_FOUND", `no background process with pid ${pid}`);
    return proc;
  }

  /** Signals the process's whole group; false when it had already exited. */
  signal(pid: number, signal: ProcessSignalName): boolean {
    const proc = this.get(pid);
    if (proc.exit) return false;
    try {
      process.kill(-proc.pid, signal);
    } catch {
      return false; // the group is gone: the exit is on its way
    }
    return true;
  }

  writeStdin(pid: number, data: Buffer): void {
    const proc = this.get(pid);
    if (proc.exit) throw new SandboxdError("CONFLICT", `process ${pid} has exited`);
    if (!proc.stdinOpen)
      throw new SandboxdError("CONFLICT", `the stdin of process ${pid} is closed`);
    if (proc.child.stdin.writableLength + data.length > MAX_STDIN_BYTES) {
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `process ${pid} has not read the ${proc.child.stdin.writableLength} bytes of stdin it ` +
          `was sent; at most ${MAX_STDIN_BYTES} may wait`,
      );
    }
    proc.child.stdin.write(data);
  }

  /** Ends the process's stdin (it reads EOF); succeeds when it is closed already. */
  closeStdin(pid: number): void {
    this.get(pid).child.stdin.end();
  }

  /** Kills every running group (sandboxd is stopping). */
  shutdown(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const proc of this.all.values()) {
      if (proc.exit) continue;
      try {
        process.kill(-proc.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }

  private watch(proc: BackgroundProcess, timeoutMs: number | undefined): void {
    const { child } = proc;
    const { executor } = this.opts;
    const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    // Decoded as it arrives (the path mask needs text) and kept as whole characters.
    const take = (stream: OutputChunk["stream"], text: string) => {
      if (!text) return;
      this.held += proc.ring.append(stream, Buffer.from(executor.virtualise(text)));
      this.enforceTotal();
      proc.notify();
    };
    let received = 0;
    child.stdout.on("data", (c: Buffer) => {
      received += c.length;
      take("stdout", decoders.stdout.write(c));
    });
    child.stderr.on("data", (c: Buffer) => {
      received += c.length;
      take("stderr", decoders.stderr.write(c));
    });

    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => {
        timedOut = true;
        this.timers.delete(timer!);
        try {
          process.kill(-proc.pid, "SIGKILL");
        } catch {
          // already gone
        }
      }, timeoutMs);
      this.timers.add(timer);
    }

    let exitCode: number | null = null;
    const finish = () => {
      if (proc.exit) return;
      if (timer) {
        clearTimeout(timer);
        this.timers.delete(timer);
      }
      // A job the command left behind may hold the pipes open for ever: stop listening.
      child.stdout.destroy();
      child.stderr.destroy();
      child.stdin.destroy();
      take("stdout", decoders.stdout.end());
      take("stderr", decoders.stderr.end());
      this.running--;
      proc.exitedAt = Date.now();
      proc.exit = {
        stream: "exit",
        // 128 + signal number is what a shell reports for a killed command.
        exitCode: exitCode ?? 137,
        durationMs: proc.exitedAt - proc.startedAt,
        timedOut,
      };
      proc.notify();
    };
    child.on("exit", (code, signal) => {
      exitCode = code ?? (signal ? 128 + constants.signals[signal] : 1);
      finishAfterExit(() => received, finish);
    });
    child.on("close", finish);
  }

  /** Over the total, output goes oldest first: exited processes' first, then the largest ring's. */
  private enforceTotal(): void {
    while (this.held > this.opts.outputTotalBytes) {
      let victim: BackgroundProcess | undefined;
      for (const proc of this.all.values()) {
        if (proc.ring.size === 0) continue;
        if (proc.exit) {
          victim = proc;
          break;
        }
        if (!victim || proc.ring.size > victim.ring.size) victim = proc;
      }
      if (!victim) return;
      this.held -= victim.ring.dropOldest();
    }
  }

  /** Forgets exited processes past the number or age kept. */
  private prune(): void {
    const exited = [...this.all.values()].filter((p) => p.exit);
    const cutoff = Date.now() - EXITED_KEEP_MS;
    exited.forEach((proc, i) => {
      if (i < exited.length - EXITED_KEPT || proc.exitedAt < cutoff) {
        this.held -= proc.ring.clear();
        this.all.delete(proc.pid);
      }
    });
  }
}
