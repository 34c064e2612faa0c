/**
 * Persistent shell sessions for the AIO routes (`/v1/shell/*`, `/v1/bash/*`): a command run in a
 * session sees the working directory, variables, functions and activated virtualenv that the
 * session's earlier commands left, as in a terminal.
 *
 * Design: one long-lived bash per session. Each command is written to a file that the shell
 * sources (stdin from /dev/null, so a command that reads stdin cannot swallow the next one), and is
 * followed by an end marker carrying a random per-command nonce, the exit code and the working
 * directory. This was chosen over re-running every command in a fresh shell from a saved cwd/env
 * snapshot because only a live shell keeps everything `source .venv/bin/activate` sets: plain
 * (unexported) variables such as the one `deactivate` restores PATH from, functions, aliases,
 * shell options and background jobs. After each command the shell still saves its cwd, exported
 * variables, functions and aliases to a state file, used only to rebuild a shell that had to die:
 * a command past its hard timeout, or killed, has its processes killed and the shell kept; only
 * when that is not enough (a builtin loop, `exit`) does the shell go, and the next command gets a
 * new one restored from that state.
 *
 * Bounds: at most `maxSessions` shells (past that, a clear 429), each closed after `idleMs`
 * without a command; every command has a hard deadline and per-stream output caps, as one-shot
 * commands do.
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import type { Executor } from "./executor.ts";
import { STATE_DIR } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import { OutputCap, finishAfterExit, signalGroup, spawnDetached } from "./process.ts";
import { SandboxdError } from "./wire.ts";

/** The bash API's statuses; the shell API maps them onto its own names. */
export type CommandStatus = "pending" | "running" | "completed" | "timed_out" | "killed";

/** Commands a session remembers for polling, and commands remembered after their session closed. */
const KEPT_COMMANDS = 16;
const KEPT_CLOSED = 64;
/** Commands waiting behind a busy session. */
const MAX_QUEUED = 8;
/** After signalling a command's processes, how long the shell gets to report before it goes too. */
const KILL_GRACE_MS = 1000;

/** One output stream of one command: kept up to a cap, the rest counted and dropped. */
class Output extends OutputCap {
  private chunks: Buffer[] = [];
  private joined: Buffer | null = null;

  push(b: Buffer): void {
    if (b.length === 0) return;
    const part = this.take(b);
    if (!part) return;
    this.chunks.push(Buffer.from(part));
    this.joined = null;
  }

  /**
   * The bytes kept from `offset` on, ending on a whole UTF-8 character unless `all` (a finished
   * command), so polling by offsets never splits a character.
   */
  from(offset: number, all: boolean): Buffer {
    this.joined ??= Buffer.concat(this.chunks);
    this.chunks = [this.joined];
    const tail = this.joined.subarray(Math.min(Math.max(offset, 0), this.kept));
    return all ? tail : tail.subarray(0, utf8Boundary(tail));
  }
}

/** Length of `b` without a trailing, incomplete UTF-8 sequence. */
function utf8Boundary(b: Buffer): number {
  for (let back = 1; back <= Math.min(3, b.length); back++) {
    const byte = b[b.length - back]!;
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return need > back ? b.length - back : b.length;
  }
  return b.length;
}

export class SessionCommand {
  readonly id = randomUUID();
  readonly command: string;
  readonly sessionId: string;
  status: CommandStatus = "pending";
  exitCode: number | null = null;
  readonly stdout: Output;
  readonly stderr: Output;
  lastOutputAt = Date.now();
  /** Resolves once the command is over, whatever ended it. */
  readonly done: Promise<void>;
  /** Resolves once the command runs (or ended without running). */
  readonly started: Promise<void>;
  private resolveDone!: () => void;
  private resolveStarted!: () => void;
  private waiters = new Set<() => void>();

  constructor(sessionId: string, command: string, outputCap: number) {
    this.sessionId = sessionId;
    this.command = command;
    this.stdout = new Output(outputCap);
    this.stderr = new Output(outputCap);
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    this.started = new Promise((resolve) => (this.resolveStarted = resolve));
  }

  start(): void {
    this.status = "running";
    this.resolveStarted();
  }

  get finished(): boolean {
    return this.status !== "pending" && this.status !== "running";
  }

  push(stream: "stdout" | "stderr", b: Buffer): void {
    if (b.length === 0) return;
    this[stream].push(b);
    this.lastOutputAt = Date.now();
    this.wake();
  }

  finish(status: CommandStatus, exitCode: number | null): void {
    if (this.finished) return;
    this.status = status;
    this.exitCode = exitCode;
    this.resolveStarted();
    this.resolveDone();
    this.wake();
  }

  /** Resolves on the next output or the end of the command, or after `ms`. */
  async changed(ms: number): Promise<void> {
    if (this.finished) return;
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    this.waiters.add(wake);
    const timer = setTimeout(wake, ms);
    await woken;
    clearTimeout(timer);
    this.waiters.delete(wake);
  }

  /** Resolves when the command ends or after `ms`, whichever is first. */
  async settled(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.done, new Promise((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
  }

  private wake(): void {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }
}

export interface SessionsHost {
  executor: Executor;
  /** The native jail: session state files live in its Sandpit state directory. */
  jail: PathJail;
  outputCapBytes: number;
  maxSessions: number;
  idleMs: number;
}

export interface RunOptions {
  /** Host path to `cd` into first; the change persists, as AIO's exec_dir does. */
  cwd?: string | undefined;
  /** Variables for this command only (its children see them; the session keeps none). */
  env?: Record<string, string> | undefined;
  hardTimeoutMs: number;
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

export class ShellSession {
  readonly id: string;
  /** stderr joined into stdout (the shell API's one `output`), or kept apart (the bash API). */
  readonly combined: boolean;
  readonly createdAt = Date.now();
  lastUsedAt = Date.now();
  /** The shell's working directory as of its last command (a host path). */
  cwd: string;
  noChangeTimeoutS: number | undefined;
  /** The command running now, else the last one. */
  latest: SessionCommand | null = null;
  readonly commands = new Map<string, SessionCommand>();
  commandCount = 0;
  private readonly host: SessionsHost;
  private readonly key = randomBytes(12).toString("hex");
  private child: ChildProcessWithoutNullStreams | null = null;
  private current: SessionCommand | null = null;
  private queued = 0;
  private tail: Promise<void> = Promise.resolve();
  private nonce = Buffer.alloc(0);
  private pending = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  private marked = { stdout: false, stderr: false };
  private markedExit = 0;
  /** Bytes read from the shell's pipes, for the drain after it exits. */
  private received = 0;
  private endStatus: CommandStatus | null = null;
  private closed = false;

  constructor(host: SessionsHost, id: string, combined: boolean, cwd: string) {
    this.host = host;
    this.id = id;
    this.combined = combined;
    this.cwd = cwd;
  }

  get busy(): boolean {
    return this.current !== null || this.queued > 0;
  }

  /** Queues a command; it starts once the commands before it are done. */
  run(command: string, o: RunOptions): SessionCommand {
    if (this.closed) throw new SandboxdError("NOT_FOUND", `shell session ${this.id} was closed`);
    if (this.queued >= MAX_QUEUED) {
      throw new SandboxdError(
        "CONFLICT",
        `shell session ${this.id} already has ${MAX_QUEUED} commands waiting; wait for them or kill the running one`,
      );
    }
    const cmd = new SessionCommand(this.id, command, this.host.outputCapBytes);
    this.remember(cmd);
    this.queued++;
    this.tail = this.tail.then(async () => {
      this.queued--;
      await this.execute(cmd, o).catch((err: unknown) => {
        cmd.push("stderr", Buffer.from(`sandboxd: ${(err as Error).message}\n`));
        cmd.finish("completed", 127);
      });
    });
    return cmd;
  }

  /** Ends the running command (and drops queued ones): its processes first, the shell if need be. */
  async kill(signal: NodeJS.Signals = "SIGKILL", status: CommandStatus = "killed"): Promise<void> {
    for (const cmd of this.commands.values())
      if (cmd.status === "pending") cmd.finish(status, null);
    const cmd = this.current;
    const pid = this.child?.pid;
    if (!cmd || pid === undefined) return;
    this.endStatus ??= status;
    await signalGroup(pid, signal, pid);
    await cmd.settled(KILL_GRACE_MS);
    if (!cmd.finished) await signalGroup(pid, "SIGKILL");
    await cmd.done;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const cmd of this.commands.values())
      if (cmd.status === "pending") cmd.finish("killed", null);
    this.endStatus ??= "killed";
    const pid = this.child?.pid;
    if (pid !== undefined) await signalGroup(pid, "SIGKILL");
    await this.current?.done;
    for (const ext of ["cmd", "state"]) {
      await this.host.jail.remove(this.file(ext), false).catch(() => undefined);
    }
  }

  private remember(cmd: SessionCommand): void {
    this.latest = cmd;
    this.commandCount++;
    this.commands.set(cmd.id, cmd);
    for (const id of this.commands.keys()) {
      if (this.commands.size <= KEPT_COMMANDS) break;
      this.commands.delete(id);
    }
  }

  private file(ext: string) {
    const { jail } = this.host;
    return jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/shell/${this.key}.${ext}`);
  }

  private async execute(cmd: SessionCommand, o: RunOptions): Promise<void> {
    if (cmd.finished) return; // killed while it waited
    const { executor, jail } = this.host;
    const cmdFile = this.file("cmd");
    await jail.writeFile(cmdFile, executor.localise(cmd.command));
    const child = await this.shell();
    if (cmd.finished) return; // killed while the shell was being prepared
    this.current = cmd;
    this.endStatus = null;
    this.pending = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    this.marked = { stdout: false, stderr: false };
    this.lastUsedAt = Date.now();
    cmd.start();
    // The nonce is written in two halves so that no echo of this line (set -v, set -x) carries it.
    const nonce = randomBytes(16).toString("hex");
    this.nonce = Buffer.from(nonce);
    const [a, b] = [quote(nonce.slice(0, 16)), quote(nonce.slice(16))];
    const env = Object.entries(o.env ?? {})
      .map(([k, v]) => `${k}=${quote(v)} `)
      .join("");
    const cd = o.cwd ? `cd -- ${quote(o.cwd)} && ` : "";
    const state = quote(executor.inSandbox(this.file("state")));
    const line =
      `{ ${cd}${env}. ${quote(executor.inSandbox(cmdFile))}; } < /dev/null; __sandpit_rc=$?; ` +
      `{ export -p; declare -f; alias -p; printf 'cd -- %q\\n' "$PWD"; } > ${state} 2>/dev/null; ` +
      `printf '%s%s%d %s\\n' ${a} ${b} "$__sandpit_rc" "$PWD"` +
      (this.combined ? "\n" : `; printf '%s%s\\n' ${a} ${b} >&2\n`);
    const timer = setTimeout(() => void this.kill("SIGKILL", "timed_out"), o.hardTimeoutMs);
    try {
      child.stdin.write(line);
      await cmd.done;
    } finally {
      clearTimeout(timer);
      this.current = null;
      this.lastUsedAt = Date.now();
    }
  }

  /** The live shell, or a new one restored from the state the last command saved. */
  private async shell(): Promise<ChildProcessWithoutNullStreams> {
    if (this.child) return this.child;
    const { executor } = this.host;
    await executor.interpreters();
    const child = spawnDetached("bash", ["--noprofile", "--norc"], {
      cwd: this.cwd,
      env: executor.processEnv(),
    });
    this.child = child;
    child.stdout.on("data", (b: Buffer) => {
      this.received += b.length;
      this.onData("stdout", b);
    });
    child.stderr.on("data", (b: Buffer) => {
      this.received += b.length;
      this.onData("stderr", b);
    });
    child.stdin.on("error", () => undefined); // the shell died; its exit is handled below
    child.on("error", () => this.onExit(child, 127));
    child.on("exit", (code, signal) => this.onExit(child, code ?? (signal ? 137 : 1)));
    const state = quote(executor.inSandbox(this.file("state")));
    child.stdin.write(
      (this.combined ? "exec 2>&1\n" : "") +
        `if [ -f ${state} ]; then . ${state} > /dev/null 2>&1; fi\n`,
    );
    return child;
  }

  private onExit(child: ChildProcessWithoutNullStreams, code: number): void {
    if (this.child !== child) return;
    this.child = null;
    const cmd = this.current;
    // The rest of its output, as a command's (./process.ts): a job it left may hold the pipes.
    finishAfterExit(
      () => this.received,
      () => {
        child.stdout.destroy();
        child.stderr.destroy();
        if (cmd && !cmd.finished) {
          for (const s of ["stdout", "stderr"] as const) cmd.push(s, this.pending[s]);
          cmd.finish(this.endStatus ?? "completed", code);
        }
      },
    );
  }

  /** Passes output to the running command until its end marker; output between commands is dropped. */
  private onData(stream: "stdout" | "stderr", chunk: Buffer): void {
    const cmd = this.current;
    if (!cmd || this.marked[stream]) return;
    let buf = this.pending[stream].length ? Buffer.concat([this.pending[stream], chunk]) : chunk;
    const n = this.nonce.length;
    for (;;) {
      const at = buf.indexOf(this.nonce);
      if (at === -1) {
        const keep = Math.min(buf.length, n - 1);
        cmd.push(stream, buf.subarray(0, buf.length - keep));
        this.pending[stream] = Buffer.from(buf.subarray(buf.length - keep));
        return;
      }
      cmd.push(stream, buf.subarray(0, at));
      const nl = buf.indexOf(10, at + n);
      if (nl === -1) {
        this.pending[stream] = Buffer.from(buf.subarray(at));
        return;
      }
      const trailer = buf.subarray(at + n, nl).toString();
      const m = stream === "stdout" ? /^(-?\d+) (.*)$/s.exec(trailer) : trailer === "" ? [] : null;
      if (!m) {
        // The nonce followed by something else is not our marker: it is output.
        cmd.push(stream, buf.subarray(at, at + 1));
        buf = buf.subarray(at + 1);
        continue;
      }
      if (stream === "stdout") {
        this.markedExit = Number(m[1]);
        this.cwd = m[2] ?? this.cwd;
      }
      this.marked[stream] = true;
      this.pending[stream] = Buffer.alloc(0);
      if (this.marked.stdout && (this.combined || this.marked.stderr)) {
        cmd.finish(this.endStatus ?? "completed", this.markedExit);
      }
      return;
    }
  }
}

/** The session id a shell command without `id` runs in (AIO keeps one shell for those). */
export const DEFAULT_SESSION = "default";

export class ShellSessions {
  private readonly host: SessionsHost;
  private readonly sessions = new Map<string, ShellSession>();
  /** Commands of sessions that closed, so their output can still be polled. */
  private readonly closedCommands: SessionCommand[] = [];
  private readonly sweeper: NodeJS.Timeout;

  constructor(host: SessionsHost) {
    this.host = host;
    this.sweeper = setInterval(
      () => void this.sweep(),
      Math.max(250, Math.min(host.idleMs / 2, 60_000)),
    );
    this.sweeper.unref();
  }

  get max(): number {
    return this.host.maxSessions;
  }

  get idleSeconds(): number {
    return Math.round(this.host.idleMs / 1000);
  }

  /** Whether a command runs or waits in some session (for the idle measure). */
  get active(): boolean {
    for (const s of this.sessions.values()) if (s.busy) return true;
    return false;
  }

  get(id: string): ShellSession | undefined {
    return this.sessions.get(id);
  }

  /** The session, which must exist. */
  need(id: string): ShellSession {
    const s = this.sessions.get(id);
    if (!s) throw new SandboxdError("NOT_FOUND", `no shell session ${JSON.stringify(id)}`);
    return s;
  }

  /** An existing session by id, or a new one (starting in `cwd`, a host path). */
  open(id: string, o: { combined: boolean; cwd: string }): ShellSession {
    const existing = this.sessions.get(id);
    if (existing) return existing;
    if (this.sessions.size >= this.host.maxSessions) {
      throw new SandboxdError(
        "CAPACITY_EXCEEDED",
        `${this.host.maxSessions} shell sessions are open, the most this sandbox keeps: close one ` +
          `(DELETE /v1/shell/sessions/{id} or POST /v1/bash/sessions/{id}/close) or wait for idle ` +
          `ones to close after ${this.idleSeconds} s`,
      );
    }
    const s = new ShellSession(this.host, id, o.combined, o.cwd);
    this.sessions.set(id, s);
    return s;
  }

  list(): ShellSession[] {
    return [...this.sessions.values()];
  }

  async close(id: string): Promise<boolean> {
    const s = this.sessions.get(id);
    if (!s) return false;
    this.sessions.delete(id);
    for (const cmd of s.commands.values()) this.closedCommands.push(cmd);
    this.closedCommands.splice(0, Math.max(0, this.closedCommands.length - KEPT_CLOSED));
    await s.close();
    return true;
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.sessions.keys()].map((id) => this.close(id)));
  }

  /** Stops the idle sweeper and every shell (sandboxd is stopping). */
  async shutdown(): Promise<void> {
    clearInterval(this.sweeper);
    await this.closeAll();
  }

  /** A command by session and id; without an id, the session's latest. */
  command(sessionId: string, commandId?: string): SessionCommand {
    const s = this.sessions.get(sessionId);
    const found = commandId
      ? (s?.commands.get(commandId) ??
        this.closedCommands.find((c) => c.id === commandId && c.sessionId === sessionId))
      : (s?.latest ?? this.closedCommands.findLast((c) => c.sessionId === sessionId));
    if (!found) {
      throw new SandboxdError(
        "NOT_FOUND",
        commandId
          ? `no command ${JSON.stringify(commandId)} in session ${JSON.stringify(sessionId)}`
          : `no command has run in session ${JSON.stringify(sessionId)}`,
      );
    }
    return found;
  }

  private async sweep(): Promise<void> {
    const now = Date.now();
    for (const s of this.list()) {
      if (!s.busy && now - s.lastUsedAt >= this.host.idleMs) await this.close(s.id);
    }
  }
}
