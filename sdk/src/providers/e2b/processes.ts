/**
 * Background commands and terminals on E2B, through the SDK's own handles: `commands.run(...,
 * {background: true, stdin: true})`, `commands.list/connect/sendStdin/closeStdin/kill` and
 * `pty.create/connect/sendInput/resize/kill` (envd's process.Process service).
 *
 * What envd does not record, Sandpit records in the process's environment when it starts it:
 * the start time (SANDPIT_STARTED_AT), the tag (SANDPIT_TAG) and that it is a terminal
 * (SANDPIT_PTY); `list()` reads them back from envd's process list. envd keeps no output for a
 * later attach, so `connect` delivers output from the moment it attaches (`droppedBytes` -1:
 * unknown; an `offset` past 0 is refused), and it forgets a process once it exits: a later
 * `kill`/`connect`/`sendStdin` by pid says NOT_FOUND, while a handle that saw the exit answers as
 * the contract says for an exited process (kill false, stdin CONFLICT, closeStdin a no-op). envd's signal call knows only SIGKILL and SIGTERM and the SDK sends only SIGKILL;
 * other signals are sent with `kill(1)` inside the sandbox, to the process group. A process a
 * signal ended reports exit code -1 and "signal: killed" (Go's wording); Sandpit reports
 * 128 + the signal's number, as a shell does.
 */
import { CommandExitError, type CommandHandle as E2BHandle, type Sandbox } from "e2b";
import { SandboxError } from "../../errors.ts";
import { checkSignal } from "../../validate.ts";
import type {
  CommandConnectOptions,
  CommandHandle,
  ProcessInfo,
  ProcessSignal,
  PtyConnectOptions,
  PtyCreateOptions,
  PtyHandle,
  PtySize,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
  SandboxPty,
} from "../../types.ts";
import { abortReason, checkEnvs, checkPtySize, inputBytes, virtualPath } from "../cloud-common.ts";
import { fromE2B, fromE2BStart } from "./errors.ts";

/** Environment variables Sandpit sets on what it starts, so that `list()` can report them. */
export const MARKERS = {
  startedAt: "SANDPIT_STARTED_AT",
  tag: "SANDPIT_TAG",
  pty: "SANDPIT_PTY",
} as const;

/** What the process calls need from the instance. */
export interface E2BProcessHost {
  readonly sandbox: Sandbox;
  alive(): void;
  readonly workingDirectory: string;
  /** Runs a short command to completion (used for signals envd cannot send). */
  exec(
    command: string,
    o: { cwd: string; timeoutMs: number; user?: string; stdin?: string | Uint8Array },
  ): Promise<SandboxExecutionResult>;
}

export function checkPid(pid: unknown): number {
  if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 0)
    throw new SandboxError(`invalid process id ${String(pid)}`, "INVALID_ARGUMENT");
  return pid;
}

function checkTag(tag: unknown): string | undefined {
  if (tag === undefined) return undefined;
  if (typeof tag !== "string" || tag.length > 255)
    throw new SandboxError("tag must be a string of at most 255 characters", "INVALID_ARGUMENT");
  return tag;
}

/** Go's names of signals (ProcessState.String()) and their numbers. */
const GO_SIGNALS: Record<string, number> = {
  hangup: 1,
  interrupt: 2,
  quit: 3,
  aborted: 6,
  killed: 9,
  "user defined signal 1": 10,
  "segmentation fault": 11,
  "user defined signal 2": 12,
  "broken pipe": 13,
  terminated: 15,
};

/** An exit code from envd's end event: 128 + n for a process signal n ended (envd says -1). */
export function exitCodeOf(r: { exitCode: number; error?: string | undefined }): number {
  if (r.exitCode !== -1) return r.exitCode;
  const name = /^signal: (.+)$/.exec(r.error ?? "")?.[1];
  const n = name === undefined ? undefined : GO_SIGNALS[name];
  return n === undefined ? r.exitCode : 128 + n;
}

/** `bash -l -c <command>` (how the SDK starts commands) shown as the command itself. */
function commandText(cmd: string, args: string[]): string {
  const i = args.indexOf("-c");
  if (/(^|\/)(ba)?sh$/.test(cmd) && i >= 0 && i === args.length - 2) return args[i + 1]!;
  return [cmd, ...args].join(" ");
}

export class E2BCommands implements SandboxCommands {
  readonly #host: E2BProcessHost;
  readonly #foreground: (
    command: string,
    options?: SandboxCommandOptions,
  ) => Promise<SandboxExecutionResult>;

  constructor(
    host: E2BProcessHost,
    foreground: (
      command: string,
      options?: SandboxCommandOptions,
    ) => Promise<SandboxExecutionResult>,
  ) {
    this.#host = host;
    this.#foreground = foreground;
  }

  run = ((command: string, options?: SandboxCommandOptions & { background?: boolean }) =>
    options?.background
      ? this.#start(command, options)
      : this.#foreground(command, options)) as SandboxCommands["run"];

  async #start(command: string, o: SandboxCommandOptions): Promise<CommandHandle> {
    if (typeof command !== "string" || command.length === 0)
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    const tag = checkTag(o.tag);
    if (o.stdin !== undefined && typeof o.stdin !== "string")
      throw new SandboxError("stdin must be a string", "INVALID_ARGUMENT");
    const cwd = virtualPath(o.cwd ?? this.#host.workingDirectory);
    this.#host.alive();
    let h: E2BHandle;
    try {
      h = await this.#host.sandbox.commands.run(command, {
        background: true,
        stdin: true,
        cwd,
        envs: {
          ...o.envs,
          [MARKERS.startedAt]: new Date().toISOString(),
          ...(tag !== undefined ? { [MARKERS.tag]: tag } : {}),
        },
        // The process lives until it exits or is killed, not until a stream deadline.
        timeoutMs: 0,
        ...(o.onStdout ? { onStdout: o.onStdout } : {}),
        ...(o.onStderr ? { onStderr: o.onStderr } : {}),
      });
    } catch (err) {
      throw fromE2BStart(err, "starting a background command");
    }
    const handle = new E2BCommandHandle(h, this, 0);
    if (o.stdin) await handle.sendStdin(o.stdin);
    return handle;
  }

  async list(): Promise<ProcessInfo[]> {
    this.#host.alive();
    let procs;
    try {
      procs = await this.#host.sandbox.commands.list();
    } catch (err) {
      throw fromE2B(err, "listing processes");
    }
    return procs.map((p) => {
      const started = new Date(p.envs[MARKERS.startedAt] ?? 0);
      const tag = p.tag ?? p.envs[MARKERS.tag];
      return {
        pid: p.pid,
        command: commandText(p.cmd, p.args),
        cwd: p.cwd ?? "",
        ...(tag !== undefined ? { tag } : {}),
        pty: p.envs[MARKERS.pty] === "1",
        startedAt: Number.isNaN(started.getTime()) ? new Date(0) : started,
      };
    });
  }

  async connect(pid: number, o: CommandConnectOptions = {}): Promise<CommandHandle> {
    checkPid(pid);
    const offset = o.offset ?? 0;
    if (offset !== "end" && (!Number.isInteger(offset) || offset < 0))
      throw new SandboxError('offset must be a non-negative integer or "end"', "INVALID_ARGUMENT");
    // "end" is what envd does anyway: output from the moment of attaching.
    if (offset !== "end" && offset > 0)
      throw new SandboxError(
        "E2B keeps no output of a process to replay: a new client sees new output only (offset 0)",
        "INVALID_ARGUMENT",
      );
    this.#host.alive();
    if (o.signal?.aborted) throw abortReason(o.signal);
    let h: E2BHandle;
    try {
      h = await this.#host.sandbox.commands.connect(pid, {
        timeoutMs: 0,
        ...(o.onStdout ? { onStdout: o.onStdout } : {}),
        ...(o.onStderr ? { onStderr: o.onStderr } : {}),
      });
    } catch (err) {
      throw fromE2B(err, `connecting to process ${pid}`);
    }
    const handle = new E2BCommandHandle(h, this, -1);
    o.signal?.addEventListener("abort", () => void handle.disconnect(), { once: true });
    return handle;
  }

  /**
   * envd answers false for a pid it does not know, which is also every process that has
   * exited (it forgets them): NOT_FOUND, as for any unknown pid. A handle turns that into false.
   */
  async kill(pid: number, signal: ProcessSignal = "SIGKILL"): Promise<boolean> {
    checkPid(pid);
    checkSignal(signal);
    this.#host.alive();
    const missing = () => new SandboxError(`no process ${pid}`, "NOT_FOUND");
    if (signal === "SIGKILL") {
      let killed: boolean;
      try {
        killed = await this.#host.sandbox.commands.kill(pid);
      } catch (err) {
        throw fromE2B(err, `killing process ${pid}`);
      }
      if (!killed) throw missing();
      return true;
    }
    // Only processes envd runs, as for SIGKILL.
    if (!(await this.list()).some((p) => p.pid === pid)) throw missing();
    // The group first (a shell's children too); a process that leads no group by its pid.
    const name = signal.slice(3);
    const r = await this.#host.exec(
      `kill -s ${name} -- -${pid} 2>/dev/null || kill -s ${name} ${pid} 2>/dev/null`,
      { cwd: "/", timeoutMs: 30_000 },
    );
    if (r.exitCode !== 0) throw missing();
    return true;
  }

  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid);
    if (typeof data !== "string" && !(data instanceof Uint8Array))
      throw new SandboxError("stdin data must be a string or a Uint8Array", "INVALID_ARGUMENT");
    this.#host.alive();
    try {
      await this.#host.sandbox.commands.sendStdin(pid, data);
    } catch (err) {
      throw fromE2B(err, `writing to the stdin of process ${pid}`);
    }
  }

  async closeStdin(pid: number): Promise<void> {
    checkPid(pid);
    this.#host.alive();
    try {
      await this.#host.sandbox.commands.closeStdin(pid);
    } catch (err) {
      throw fromE2B(err, `closing the stdin of process ${pid}`);
    }
  }
}

class E2BCommandHandle implements CommandHandle {
  readonly pid: number;
  readonly droppedBytes: number;
  readonly #h: E2BHandle;
  readonly #commands: E2BCommands;
  readonly #result: Promise<SandboxExecutionResult>;
  #disconnected = false;
  #exited = false;

  constructor(h: E2BHandle, commands: E2BCommands, droppedBytes: number) {
    this.#h = h;
    this.#commands = commands;
    this.pid = h.pid;
    this.droppedBytes = droppedBytes;
    this.#result = h.wait().then(
      (r) => ({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }),
      (err: unknown) => {
        if (err instanceof CommandExitError)
          return { exitCode: exitCodeOf(err), stdout: err.stdout, stderr: err.stderr };
        if (this.#disconnected)
          throw new SandboxError(
            `this handle was disconnected from process ${this.pid}; connect again to wait for it`,
            "CONFLICT",
          );
        throw fromE2B(err, `waiting for process ${this.pid}`);
      },
    );
    // Nobody may ever wait; the outcome is still observed.
    this.#result.then(
      () => (this.#exited = true),
      () => undefined,
    );
  }

  /**
   * This handle's process is known to have existed, so envd's NOT_FOUND means it has exited
   * (envd forgets exited processes): `onExited` answers for that case.
   */
  async #unlessExited<T>(call: () => Promise<T>, onExited: () => T): Promise<T> {
    if (this.#exited) return onExited();
    try {
      return await call();
    } catch (err) {
      if (err instanceof SandboxError && err.code === "NOT_FOUND") return onExited();
      throw err;
    }
  }

  get stdout(): string {
    return this.#h.stdout;
  }
  get stderr(): string {
    return this.#h.stderr;
  }

  wait(): Promise<SandboxExecutionResult> {
    return this.#result;
  }
  kill(signal?: ProcessSignal): Promise<boolean> {
    return this.#unlessExited(
      () => this.#commands.kill(this.pid, signal),
      () => false,
    );
  }
  sendStdin(data: string | Uint8Array): Promise<void> {
    return this.#unlessExited(
      () => this.#commands.sendStdin(this.pid, data),
      () => {
        throw new SandboxError(`process ${this.pid} has exited`, "CONFLICT");
      },
    );
  }
  closeStdin(): Promise<void> {
    return this.#unlessExited(
      () => this.#commands.closeStdin(this.pid),
      () => undefined,
    );
  }
  async disconnect(): Promise<void> {
    this.#disconnected = true;
    await this.#h.disconnect();
  }
}

/**
 * Terminals through `sandbox.pty`. envd starts `bash -i -l` for every terminal; a `command` is
 * typed into it as `exec <command>`, so the terminal becomes that program (its echo included).
 */
export class E2BPty implements SandboxPty {
  readonly #host: E2BProcessHost;
  constructor(host: E2BProcessHost) {
    this.#host = host;
  }

  async create(o: PtyCreateOptions): Promise<PtyHandle> {
    const size = checkPtySize(o);
    if (typeof o.onData !== "function")
      throw new SandboxError("onData must be a function", "INVALID_ARGUMENT");
    if (o.command !== undefined && (typeof o.command !== "string" || !o.command.trim()))
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    const cwd = virtualPath(o.cwd ?? this.#host.workingDirectory);
    this.#host.alive();
    if (o.signal?.aborted) throw abortReason(o.signal);
    let h: E2BHandle;
    try {
      h = await this.#host.sandbox.pty.create({
        ...size,
        cwd,
        envs: { ...o.envs, [MARKERS.startedAt]: new Date().toISOString(), [MARKERS.pty]: "1" },
        onData: o.onData,
        timeoutMs: 0,
      });
    } catch (err) {
      throw fromE2BStart(err, "creating a terminal");
    }
    const handle = new E2BPtyHandle(h, this);
    o.signal?.addEventListener("abort", () => void handle.disconnect(), { once: true });
    if (o.command) await handle.sendInput(`exec ${o.command}\n`);
    return handle;
  }

  /** envd replays nothing: `replay` either way is new output only. */
  async connect(pid: number, o: PtyConnectOptions): Promise<PtyHandle> {
    checkPid(pid);
    if (typeof o?.onData !== "function")
      throw new SandboxError("onData must be a function", "INVALID_ARGUMENT");
    if (o.replay !== undefined && typeof o.replay !== "boolean")
      throw new SandboxError("replay must be a boolean", "INVALID_ARGUMENT");
    this.#host.alive();
    if (o.signal?.aborted) throw abortReason(o.signal);
    let h: E2BHandle;
    try {
      h = await this.#host.sandbox.pty.connect(pid, { onData: o.onData, timeoutMs: 0 });
    } catch (err) {
      throw fromE2B(err, `connecting to terminal ${pid}`);
    }
    const handle = new E2BPtyHandle(h, this);
    o.signal?.addEventListener("abort", () => void handle.disconnect(), { once: true });
    return handle;
  }

  async sendInput(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid);
    const b = inputBytes(data);
    this.#host.alive();
    try {
      await this.#host.sandbox.pty.sendInput(pid, b);
    } catch (err) {
      throw fromE2B(err, `writing to terminal ${pid}`);
    }
  }

  async resize(pid: number, size: PtySize): Promise<void> {
    checkPid(pid);
    const s = checkPtySize(size);
    this.#host.alive();
    try {
      await this.#host.sandbox.pty.resize(pid, s);
    } catch (err) {
      throw fromE2B(err, `resizing terminal ${pid}`);
    }
  }

  /**
   * SIGKILL to the terminal's shell (envd signals that one process), then to every process left
   * in its session: background jobs and pipelines an interactive shell put in groups of their
   * own would otherwise outlive it.
   */
  async kill(pid: number): Promise<boolean> {
    checkPid(pid);
    this.#host.alive();
    let killed: boolean;
    try {
      killed = await this.#host.sandbox.pty.kill(pid);
    } catch (err) {
      throw fromE2B(err, `killing terminal ${pid}`);
    }
    if (killed) await this.#host.exec(`pkill -KILL -s ${pid}`, { cwd: "/", timeoutMs: 30_000 });
    return killed;
  }
}

class E2BPtyHandle implements PtyHandle {
  readonly pid: number;
  readonly #h: E2BHandle;
  readonly #pty: E2BPty;
  readonly #exit: Promise<{ exitCode: number }>;
  #exited = false;

  constructor(h: E2BHandle, pty: E2BPty) {
    this.#h = h;
    this.#pty = pty;
    this.pid = h.pid;
    this.#exit = h.wait().then(
      (r) => ({ exitCode: r.exitCode }),
      (err: unknown) => {
        if (err instanceof CommandExitError) return { exitCode: exitCodeOf(err) };
        throw fromE2B(err, `waiting for terminal ${this.pid}`);
      },
    );
    this.#exit.then(
      () => (this.#exited = true),
      () => undefined,
    );
  }

  /** envd forgets an exited process (NOT_FOUND); this handle saw it exit, so it says CONFLICT. */
  #running(): void {
    if (this.#exited) throw new SandboxError(`terminal ${this.pid} has exited`, "CONFLICT");
  }

  async sendInput(data: string | Uint8Array): Promise<void> {
    this.#running();
    return this.#pty.sendInput(this.pid, data);
  }
  async resize(size: PtySize): Promise<void> {
    this.#running();
    return this.#pty.resize(this.pid, size);
  }
  kill(): Promise<boolean> {
    return this.#pty.kill(this.pid);
  }
  wait(): Promise<{ exitCode: number }> {
    return this.#exit;
  }
  async disconnect(): Promise<void> {
    await this.#h.disconnect();
  }
}
