/**
 * Terminals on Daytona through the SDK's PTY sessions: `process.createPty` (the daemon's
 * create-connect WebSocket), `connectPty`, `resizePtySession`, `killPtySession` and
 * `getPtySessionInfo`.
 *
 * The daemon runs the user's login shell in every terminal; a `command` is typed into it as
 * `exec <command>`, so the terminal becomes that program. A terminal is a session named
 * `sandpit-pty-<pid>`, where `pid` is Sandpit's number for it. The daemon keeps no output for a
 * later client (a new one sees what comes after it attached) and forgets a terminal once it
 * exits. Its kill ends the shell alone, so Sandpit then ends every process left in the shell's
 * session (jobs an interactive shell put in groups of their own): the shell records its
 * session's id in a file at its first prompt, through a one-time PROMPT_COMMAND (the daemon
 * reports no pid).
 */
import { randomInt } from "node:crypto";
import type { PtyHandle as SdkPtyHandle } from "@daytonaio/sdk";
import { SandboxError } from "../../errors.ts";
import type {
  PtyConnectOptions,
  PtyCreateOptions,
  PtyHandle,
  PtySize,
  SandboxPty,
} from "../../types.ts";
import {
  abortReason,
  checkEnvs,
  checkPtySize,
  inputBytes,
  shq,
  virtualPath,
} from "../cloud-common.ts";
import { fromDaytona } from "./errors.ts";
import { checkPid, type DaytonaProcessHost } from "./processes.ts";

const SESSION_PREFIX = "sandpit-pty-";

const sessionOf = (pid: number) => `${SESSION_PREFIX}${pid}`;

export class DaytonaPty implements SandboxPty {
  readonly #host: DaytonaProcessHost;
  /** Terminals this instance is attached to: input by pid goes through their connection. */
  readonly #attached = new Map<number, DaytonaTerminal>();

  constructor(host: DaytonaProcessHost) {
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
    const pid = randomInt(1, 2 ** 31 - 1);
    const record = `mkdir -p ${shq(this.#dir)} && cut -d' ' -f6 /proc/$$/stat > ${shq(this.#sidFile(pid))}`;
    let h: SdkPtyHandle;
    try {
      h = await this.#host.sandbox.process.createPty({
        id: sessionOf(pid),
        cwd,
        envs: { ...o.envs, PROMPT_COMMAND: `${record}; unset PROMPT_COMMAND` },
        ...size,
        onData: o.onData,
      });
    } catch (err) {
      throw fromDaytona(err, "creating a terminal");
    }
    const handle = this.#track(new DaytonaTerminal(h, this, pid), o.signal);
    if (o.command) await handle.sendInput(`exec ${o.command}\n`);
    return handle;
  }

  /** The daemon replays nothing: `replay` either way is new output only. */
  async connect(pid: number, o: PtyConnectOptions): Promise<PtyHandle> {
    checkPid(pid);
    if (typeof o?.onData !== "function")
      throw new SandboxError("onData must be a function", "INVALID_ARGUMENT");
    if (o.replay !== undefined && typeof o.replay !== "boolean")
      throw new SandboxError("replay must be a boolean", "INVALID_ARGUMENT");
    if (o.signal?.aborted) throw abortReason(o.signal);
    await this.#exists(pid);
    let h: SdkPtyHandle;
    try {
      h = await this.#host.sandbox.process.connectPty(sessionOf(pid), { onData: o.onData });
    } catch (err) {
      throw fromDaytona(err, `connecting to terminal ${pid}`);
    }
    return this.#track(new DaytonaTerminal(h, this, pid), o.signal);
  }

  async sendInput(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid);
    const bytes = inputBytes(data);
    const attached = this.#attached.get(pid);
    if (attached) return attached.sendInput(bytes);
    // No connection of this instance: one for this input alone.
    const h = await this.connect(pid, { onData: () => undefined });
    try {
      await h.sendInput(bytes);
    } finally {
      await h.disconnect();
    }
  }

  async resize(pid: number, size: PtySize): Promise<void> {
    checkPid(pid);
    const { cols, rows } = checkPtySize(size);
    this.#host.alive();
    try {
      await this.#host.sandbox.process.resizePtySession(sessionOf(pid), cols, rows);
    } catch (err) {
      throw fromDaytona(err, `resizing terminal ${pid}`);
    }
  }

  async kill(pid: number): Promise<boolean> {
    checkPid(pid);
    this.#host.alive();
    try {
      await this.#host.sandbox.process.killPtySession(sessionOf(pid));
    } catch (err) {
      const e = fromDaytona(err, `killing terminal ${pid}`);
      if (e.code === "NOT_FOUND") return false;
      throw e;
    }
    // What is left in the shell's session: its jobs.
    const file = shq(this.#sidFile(pid));
    await this.#host.exec(
      `s=$(cat ${file} 2>/dev/null) && [ -n "$s" ] && pkill -KILL -s "$s"; rm -f ${file}; true`,
      { cwd: "/", timeoutMs: 30_000 },
    );
    return true;
  }

  get #dir(): string {
    return `${this.#host.stateDir}/ptys`;
  }

  #sidFile(pid: number): string {
    return `${this.#dir}/${pid}.pid`;
  }

  async #exists(pid: number): Promise<void> {
    this.#host.alive();
    try {
      await this.#host.sandbox.process.getPtySessionInfo(sessionOf(pid));
    } catch (err) {
      throw fromDaytona(err, `finding terminal ${pid}`);
    }
  }

  #track(t: DaytonaTerminal, signal: AbortSignal | undefined): DaytonaTerminal {
    this.#attached.set(t.pid, t);
    const forget = () => this.#attached.get(t.pid) === t && this.#attached.delete(t.pid);
    t.wait().then(forget, forget);
    t.onDisconnect = forget;
    signal?.addEventListener("abort", () => void t.disconnect(), { once: true });
    return t;
  }
}

class DaytonaTerminal implements PtyHandle {
  readonly pid: number;
  onDisconnect: () => void = () => undefined;
  readonly #h: SdkPtyHandle;
  readonly #pty: DaytonaPty;
  readonly #exit: Promise<{ exitCode: number }>;
  #exited = false;
  #disconnected = false;

  constructor(h: SdkPtyHandle, pty: DaytonaPty, pid: number) {
    this.#h = h;
    this.#pty = pty;
    this.pid = pid;
    this.#exit = h.wait().then((r) => {
      // A client's own disconnect closes the socket normally too: that is no exit.
      if (this.#disconnected)
        throw new SandboxError(
          `this handle was disconnected from terminal ${pid}; connect again to wait for it`,
          "CONFLICT",
        );
      if (typeof r.exitCode !== "number")
        throw new SandboxError(
          `Daytona: terminal ${pid} ended without an exit code${r.error ? `: ${r.error}` : ""}`,
          "CONNECTION_FAILED",
        );
      this.#exited = true;
      return { exitCode: r.exitCode };
    });
    this.#exit.catch(() => undefined);
  }

  /** The daemon forgets an exited terminal (NOT_FOUND); this handle saw it exit: CONFLICT. */
  #running(): void {
    if (this.#exited) throw new SandboxError(`terminal ${this.pid} has exited`, "CONFLICT");
  }

  async sendInput(data: string | Uint8Array): Promise<void> {
    this.#running();
    const bytes = inputBytes(data);
    if (this.#disconnected) return this.#pty.sendInput(this.pid, bytes);
    try {
      await this.#h.sendInput(bytes);
    } catch (err) {
      this.#running();
      throw fromDaytona(err, `writing to terminal ${this.pid}`);
    }
  }
  async resize(size: PtySize): Promise<void> {
    this.#running();
    return this.#pty.resize(this.pid, size);
  }
  async kill(): Promise<boolean> {
    if (this.#exited) return false;
    return this.#pty.kill(this.pid);
  }
  wait(): Promise<{ exitCode: number }> {
    return this.#exit;
  }
  async disconnect(): Promise<void> {
    if (this.#disconnected) return;
    this.#disconnected = true;
    this.onDisconnect();
    await this.#h.disconnect();
  }
}
