/**
 * Code contexts: a persistent interpreter per context (sandboxd/runners/python_kernel.py,
 * node_kernel.mjs), whose cells share variables, imports and functions, and answer with rich
 * results (docs/code-contexts.md).
 *
 * The kernel runs as the sandbox user with the sandbox's environment, in its own process group,
 * like any command. sandboxd talks to it over two extra pipes (fd 3: cells in, fd 4: events out),
 * so a cell's own output on fds 1 and 2 can never be taken for the protocol. A cell is over once
 * the kernel said `done` on fd 4 and the cell's random end mark came through both fd 1 and fd 2:
 * then every byte the cell (or a command it ran) printed has been passed on.
 *
 * Bounds: at most `maxContexts` contexts (past that, CAPACITY_EXCEEDED), each closed after
 * `idleMs` without a cell; one cell at a time per context, later ones queued (at most
 * MAX_QUEUED, then CONFLICT); each cell has a deadline and per-stream output caps. A timeout or
 * an abort interrupts the cell (SIGINT to the kernel's group) and the context lives on; a cell
 * that ignores the interrupt for INTERRUPT_GRACE_MS (stuck in native code) has its kernel killed,
 * and the context is gone, as it is when the kernel dies any other way.
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { Readable, Writable } from "node:stream";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import type { Executor } from "./executor.ts";
import { STATE_DIR } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import { OutputCap, finishAfterExit, signalGroup, spawnDetached } from "./process.ts";
import {
  DEFAULT_TIMEOUT_MS,
  SandboxdError,
  type CellEvent,
  type ContextInfo,
  type ErrorBody,
  type Language,
} from "./wire.ts";
import type { ExecuteCellRequest } from "./protocol.ts";
import { KERNELS, RUNNERS_DIR } from "./runners.ts";

/** How long an interrupted cell gets to stop before its kernel is killed. */
export const INTERRUPT_GRACE_MS = 3000;
/** Cells waiting behind a running one, per context. */
export const MAX_QUEUED = 8;
/** A kernel that has not said `ready` by then is not going to. */
const START_TIMEOUT_MS = 30_000;
/**
 * How long the unfinished last line of a cell's output is held for its newline. `print(x)` is
 * two writes (the text, then the newline) with unbuffered streams; clients expect one message
 * per line, as Jupyter's batched streams give them, whatever the pipe's timing under load.
 */
const LINE_HOLD_MS = 20;
/** Startup output kept to explain a kernel that would not start. */
const STARTUP_OUTPUT_BYTES = 4096;

export interface ContextsHost {
  executor: Executor;
  jail: PathJail;
  outputCapBytes: number;
  maxContexts: number;
  idleMs: number;
}

/**
 * One stream of one cell: kept up to the cap, decoded without splitting characters, and passed
 * on in whole lines (an unfinished line goes after LINE_HOLD_MS, or at the cell's end).
 */
class CellStream extends OutputCap {
  private readonly decoder = new StringDecoder("utf8");
  private readonly emit: (text: string) => void;
  private held = "";
  private holdTimer: NodeJS.Timeout | undefined;

  constructor(capBytes: number, emit: (text: string) => void) {
    super(capBytes);
    this.emit = emit;
  }

  feed(b: Buffer): void {
    const part = this.take(b);
    const text = this.held + (part ? this.decoder.write(part) : "");
    const cut = text.lastIndexOf("\n") + 1;
    if (cut > 0) this.emit(text.slice(0, cut));
    this.held = text.slice(cut);
    if (!this.held) {
      clearTimeout(this.holdTimer);
      this.holdTimer = undefined;
    } else if (!this.holdTimer) {
      this.holdTimer = setTimeout(() => this.flush(), LINE_HOLD_MS);
    }
  }

  /** Everything held goes now: the cell is over (or the line waited long enough). */
  flush(): void {
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    const text = this.held;
    this.held = "";
    if (text) this.emit(text);
  }

  end(): void {
    this.held += this.decoder.end();
    this.flush();
  }
}

/**
 * Output of one of the kernel's fds, handed to the running cell up to the cell's end mark.
 * Output while no cell runs (a thread a cell left behind) has no one to go to and is dropped.
 */
class MarkedOutput {
  private mark: Buffer | null = null;
  private pending = Buffer.alloc(0);
  private readonly deliver: (b: Buffer) => void;
  private readonly marked: () => void;

  constructor(deliver: (b: Buffer) => void, marked: () => void) {
    this.deliver = deliver;
    this.marked = marked;
  }

  arm(mark: Buffer): void {
    this.mark = mark;
    this.pending = Buffer.alloc(0);
  }

  feed(chunk: Buffer): void {
    const mark = this.mark;
    if (!mark) return;
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const at = buf.indexOf(mark);
    if (at >= 0) {
      this.deliver(buf.subarray(0, at));
      this.mark = null;
      this.pending = Buffer.alloc(0);
      this.marked();
      return;
    }
    // Hold back only a tail that could be the start of the mark, so output streams at once.
    let keep = Math.min(buf.length, mark.length - 1);
    while (keep > 0 && !buf.subarray(buf.length - keep).equals(mark.subarray(0, keep))) keep--;
    this.deliver(buf.subarray(0, buf.length - keep));
    this.pending = Buffer.from(buf.subarray(buf.length - keep));
  }
}

interface RunningCell {
  sink: (event: CellEvent) => void;
  started: number;
  stdout: CellStream;
  stderr: CellStream;
  /** The kernel said `done`, and the end mark came through fd 1 and fd 2. */
  done: boolean;
  marks: number;
  timedOut: boolean;
  graceTimer?: NodeJS.Timeout;
  finish: (failure?: ErrorBody) => void;
}

export class CodeContext {
  readonly id = randomUUID();
  readonly language: Language;
  /** Virtual path of the starting directory. */
  readonly cwd: string;
  readonly createdMs = Date.now();
  lastUsedMs = Date.now();
  /** Why the context is gone (its kernel exited), once it is. */
  gone: string | null = null;
  private readonly host: ContextsHost;
  private readonly onGone: (ctx: CodeContext) => void;
  private child!: ReturnType<typeof spawnDetached>;
  private cell: RunningCell | null = null;
  private queued = 0;
  private tail: Promise<void> = Promise.resolve();
  private startupOutput = "";
  /** Bytes read from the kernel's output pipes, for the drain after it exits. */
  private received = 0;

  constructor(
    host: ContextsHost,
    language: Language,
    cwd: string,
    onGone: (ctx: CodeContext) => void,
  ) {
    this.host = host;
    this.language = language;
    this.cwd = cwd;
    this.onGone = onGone;
  }

  get busy(): boolean {
    return this.cell !== null || this.queued > 0;
  }

  info(): ContextInfo {
    const { id, language, cwd, createdMs, lastUsedMs, busy } = this;
    return { id, language, cwd, createdMs, lastUsedMs, busy };
  }

  /** Starts the kernel; resolves once it is ready for cells. */
  async start(hostCwd: string): Promise<void> {
    const { executor, jail } = this.host;
    const interp = await executor.interpreters();
    const kernel = join(RUNNERS_DIR, KERNELS[this.language]);
    // The kernel's command line names its context as Jupyter names a kernel (its connection
    // file, kernel-<id>.json; the kernels ignore it), so a client that finds a context's kernel
    // the way it does on E2B (pkill -INT -f kernel-<id>.json, to interrupt a cell) finds ours.
    const named = ["-f", `kernel-${this.id}.json`];
    const argv =
      this.language === "python"
        ? [interp.python, "-u", kernel, ...named]
        : [
            interp.node,
            // The kernel uses Node's own REPL transform for top-level await, and its parser.
            "--expose-internals",
            "--disable-warning=ExperimentalWarning",
            kernel,
            ...named,
          ];
    const cellDir = executor.inSandbox(jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/cells`));
    const [file, ...args] = argv as [string, ...string[]];
    const child = spawnDetached(file, args, {
      cwd: hostCwd,
      env: executor.processEnv(
        this.language === "typescript" ? { SANDPIT_CELL_DIR: cellDir } : undefined,
      ),
      extraPipes: 2,
    });
    this.child = child;
    child.stdin.end(); // a cell reading stdin gets end of file, never a hang
    const stdout = new MarkedOutput(
      (b) => this.output("stdout", b),
      () => this.marked(),
    );
    const stderr = new MarkedOutput(
      (b) => this.output("stderr", b),
      () => this.marked(),
    );
    this.arm = (mark) => {
      stdout.arm(mark);
      stderr.arm(mark);
    };
    child.stdout.on("data", (b: Buffer) => {
      this.received += b.length;
      stdout.feed(b);
    });
    child.stderr.on("data", (b: Buffer) => {
      this.received += b.length;
      if (this.startupOutput.length < STARTUP_OUTPUT_BYTES) this.startupOutput += b.toString();
      stderr.feed(b);
    });
    (child.stdio[3] as Writable).on("error", () => undefined); // the kernel died: handled on exit
    const ready = new Promise<void>((resolve, reject) => {
      const events = process
        .getBuiltinModule("node:readline")
        .createInterface({ input: child.stdio[4] as Readable });
      events.on("line", (line) => {
        let event: { type: string; result?: unknown; error?: unknown };
        try {
          event = JSON.parse(line) as typeof event;
        } catch {
          return; // not from the kernel's protocol writer: nothing to do with it
        }
        if (event.type === "ready") started();
        else this.event(event);
      });
      const timer = setTimeout(() => {
        reject(this.startError("did not start within 30 s"));
        void signalGroup(child.pid ?? 0, "SIGKILL");
      }, START_TIMEOUT_MS);
      const started = () => {
        clearTimeout(timer);
        resolve();
      };
      child.on("error", (err) => reject(this.startError(`could not start: ${err.message}`)));
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        const how = signal ? `was killed (${signal})` : `exited with code ${code}`;
        reject(this.startError(how));
        this.exited(how);
      });
    });
    await ready;
  }

  /**
   * Runs a cell once the cells before it are done; `sink` gets its events, ending with `end` or
   * `failure`. Throws at once (before any event) when the context is gone or its queue is full.
   */
  execute(
    req: ExecuteCellRequest,
    sink: (event: CellEvent) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    if (this.gone) throw this.goneError();
    if (req.language !== undefined && req.language !== this.language) {
      throw new SandboxdError(
        "INVALID_ARGUMENT",
        `context ${this.id} runs ${this.language}, not ${req.language}`,
      );
    }
    if (this.queued >= MAX_QUEUED) {
      throw new SandboxdError(
        "CONFLICT",
        `context ${this.id} already has ${MAX_QUEUED} cells waiting; wait for them or abort the running one`,
      );
    }
    this.queued++;
    this.lastUsedMs = Date.now();
    const turn = this.tail.then(() => {
      this.queued--;
      return this.run(req, sink, signal);
    });
    this.tail = turn.catch(() => undefined);
    return turn;
  }

  /** Stops the kernel and everything it started. */
  async close(): Promise<void> {
    if (!this.gone) {
      this.exited("was removed");
      await signalGroup(this.child.pid ?? 0, "SIGKILL");
    }
  }

  private arm: (mark: Buffer) => void = () => undefined;

  private run(
    req: ExecuteCellRequest,
    sink: (event: CellEvent) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    if (signal?.aborted) return Promise.resolve(); // aborted while it waited
    if (this.gone) {
      sink({ type: "failure", error: { code: "NOT_FOUND", message: this.goneError().message } });
      return Promise.resolve();
    }
    const { executor, outputCapBytes } = this.host;
    return new Promise<void>((resolve) => {
      const timeoutMs = req.timeoutMs ?? DEFAULT_TIMEOUT_MS;
      const timer = setTimeout(() => {
        cell.timedOut = true;
        this.interrupt();
      }, timeoutMs);
      const onAbort = () => this.interrupt();
      signal?.addEventListener("abort", onAbort, { once: true });
      const cell: RunningCell = {
        sink,
        started: performance.now(),
        stdout: new CellStream(outputCapBytes, (data) =>
          sink({ type: "stdout", data: executor.virtualise(data) }),
        ),
        stderr: new CellStream(outputCapBytes, (data) =>
          sink({ type: "stderr", data: executor.virtualise(data) }),
        ),
        done: false,
        marks: 0,
        timedOut: false,
        finish: (failure) => {
          clearTimeout(timer);
          clearTimeout(cell.graceTimer);
          signal?.removeEventListener("abort", onAbort);
          this.cell = null;
          this.lastUsedMs = Date.now();
          cell.stdout.end();
          cell.stderr.end();
          if (failure) sink({ type: "failure", error: failure });
          else {
            sink({
              type: "end",
              durationMs: Math.round(performance.now() - cell.started),
              timedOut: cell.timedOut,
              truncated: cell.stdout.truncated || cell.stderr.truncated,
            });
          }
          resolve();
        },
      };
      this.cell = cell;
      const mark = Buffer.from(`\0sandpit-end-${randomBytes(16).toString("hex")}\0`);
      this.arm(mark);
      const request = { code: executor.localise(req.code), env: req.env ?? null, mark: `${mark}` };
      (this.child.stdio[3] as Writable).write(JSON.stringify(request) + "\n");
    });
  }

  /** SIGINT to the kernel's group; a cell still running after the grace costs the kernel. */
  private interrupt(): void {
    const cell = this.cell;
    if (!cell || cell.graceTimer) return;
    void signalGroup(this.child.pid ?? 0, "SIGINT");
    cell.graceTimer = setTimeout(() => {
      if (this.cell !== cell) return;
      this.exited(
        `did not stop within ${INTERRUPT_GRACE_MS / 1000} s of an interrupt and was killed`,
      );
      void signalGroup(this.child.pid ?? 0, "SIGKILL");
    }, INTERRUPT_GRACE_MS);
  }

  private output(stream: "stdout" | "stderr", b: Buffer): void {
    const cell = this.cell;
    if (!cell || b.length === 0) return;
    cell[stream].feed(b);
  }

  private marked(): void {
    const cell = this.cell;
    if (!cell) return;
    cell.marks++;
    this.maybeFinish(cell);
  }

  private event(event: { type: string; result?: unknown; error?: unknown }): void {
    const cell = this.cell;
    if (!cell) return;
    const { executor } = this.host;
    if (event.type === "result") {
      const result = event.result as Extract<CellEvent, { type: "result" }>["result"];
      if (typeof result.text === "string") result.text = executor.virtualise(result.text);
      cell.sink({ type: "result", result });
    } else if (event.type === "error") {
      const e = event.error as { name: string; value: string; traceback: string };
      cell.sink({
        type: "error",
        error: {
          name: String(e.name),
          value: executor.virtualise(String(e.value)),
          traceback: executor.virtualise(String(e.traceback)),
        },
      });
    } else if (event.type === "done") {
      cell.done = true;
      this.maybeFinish(cell);
    }
  }

  private maybeFinish(cell: RunningCell): void {
    if (cell.done && cell.marks >= 2) cell.finish();
  }

  /** The kernel is gone: the context goes too, and a running cell fails (after its last output). */
  private exited(how: string): void {
    if (this.gone) return;
    this.gone = how;
    this.onGone(this);
    void signalGroup(this.child.pid ?? 0, "SIGKILL"); // whatever its cells started goes with it
    const cell = this.cell;
    if (!cell) return;
    // The cell's last output, as a command's (./process.ts), however late the loop reads it.
    finishAfterExit(
      () => this.received,
      () => {
        if (this.cell !== cell) return;
        const message =
          `the ${this.language} interpreter of context ${this.id} ${how}; the context is gone ` +
          `with its variables: create a new one`;
        cell.finish({ code: cell.timedOut ? "TIMEOUT" : "EXECUTION_FAILED", message });
      },
    );
  }

  private goneError(): SandboxdError {
    return new SandboxdError(
      "NOT_FOUND",
      `context ${this.id} is gone: its interpreter ${this.gone ?? "exited"}`,
    );
  }

  private startError(how: string): SandboxdError {
    const said = this.host.executor.virtualise(this.startupOutput.trim()).slice(-2000);
    return new SandboxdError(
      "EXECUTION_FAILED",
      `the ${this.language} interpreter for a new context ${how}${said ? `: ${said}` : ""}`,
    );
  }
}

export class CodeContexts {
  private readonly host: ContextsHost;
  private readonly contexts = new Map<string, CodeContext>();
  /** Contexts whose kernel is starting, counted against the limit. */
  private starting = 0;
  private readonly sweeper: NodeJS.Timeout;

  constructor(host: ContextsHost) {
    this.host = host;
    this.sweeper = setInterval(
      () => void this.sweep(),
      Math.max(250, Math.min(host.idleMs / 2, 60_000)),
    );
    this.sweeper.unref();
  }

  /** Whether a cell runs or waits in some context (for the idle measure). */
  get active(): boolean {
    for (const c of this.contexts.values()) if (c.busy) return true;
    return false;
  }

  async create(language: Language, cwd: string | undefined): Promise<CodeContext> {
    const { executor, maxContexts, idleMs } = this.host;
    if (this.contexts.size + this.starting >= maxContexts) {
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `${maxContexts} code contexts are open, the most this sandbox keeps: remove one ` +
          `(DELETE /v1/contexts/{id}) or wait for idle ones to close after ${Math.round(idleMs / 1000)} s`,
      );
    }
    this.starting++;
    try {
      const dir = await executor.existingDir(cwd);
      const ctx = new CodeContext(this.host, language, dir.virtual, (c) =>
        this.contexts.delete(c.id),
      );
      await ctx.start(executor.inSandbox(dir));
      this.contexts.set(ctx.id, ctx);
      return ctx;
    } finally {
      this.starting--;
    }
  }

  /** The context, which must exist. */
  need(id: string): CodeContext {
    const ctx = this.contexts.get(id);
    if (!ctx) throw new SandboxdError("NOT_FOUND", `no code context ${JSON.stringify(id)}`);
    return ctx;
  }

  list(): CodeContext[] {
    return [...this.contexts.values()];
  }

  async remove(id: string): Promise<void> {
    await this.need(id).close();
  }

  /** Stops the idle sweeper and every kernel (sandboxd is stopping). */
  async shutdown(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all(this.list().map((c) => c.close()));
  }

  private async sweep(): Promise<void> {
    const now = Date.now();
    for (const c of this.list()) {
      if (!c.busy && now - c.lastUsedMs >= this.host.idleMs) await c.close();
    }
  }
}
