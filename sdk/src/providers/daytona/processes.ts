/**
 * Background commands on Daytona, through its session API: each background command gets a
 * session of its own (`sandpit-bg-<pid>`), started with `executeSessionCommand(...,
 * {runAsync: true})`, followed with `getSessionCommandLogs` (the daemon keeps a command's whole
 * log, so every attach replays it from the start), written to with `sendSessionCommandInput`.
 *
 * What Daytona does not record, Sandpit puts in the session command itself: a leading no-op
 * `: sandpit <base64 JSON>` carries the command, cwd, tag and start time, so `list()` and
 * `connect()` work from any client. The `pid` is Sandpit's number for the session (the
 * process's own pid is kept in a file beside it, for signals). Not mapped: `closeStdin` (the
 * toolbox has no call that ends a command's stdin) and binary stdin (input is text).
 */
import { randomInt } from "node:crypto";
import type { Sandbox } from "@daytonaio/sdk";
import { SandboxError } from "../../errors.ts";
import { checkSignal } from "../../validate.ts";
import type {
  CommandConnectOptions,
  CommandHandle,
  ProcessInfo,
  ProcessSignal,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
} from "../../types.ts";
import { notSupported } from "../../unsupported.ts";
import { abortReason, checkEnvs, shq, virtualPath } from "../cloud-common.ts";
import { fromDaytona } from "./errors.ts";

const SESSION_PREFIX = "sandpit-bg-";
const META_MARK = ": sandpit ";

interface Meta {
  command: string;
  cwd: string;
  tag?: string;
  startedAt: string;
}

/** What the process calls need from the instance. */
export interface DaytonaProcessHost {
  readonly sandbox: Sandbox;
  readonly workingDirectory: string;
  /** Where Sandpit keeps its state in the sandbox (pid files go to `${stateDir}/procs`). */
  readonly stateDir: string;
  alive(): void;
  exec(command: string, o: { cwd: string; timeoutMs: number }): Promise<SandboxExecutionResult>;
}

export function checkPid(pid: unknown): number {
  if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 0)
    throw new SandboxError(`invalid process id ${String(pid)}`, "INVALID_ARGUMENT");
  return pid;
}

export class DaytonaCommands implements SandboxCommands {
  readonly #host: DaytonaProcessHost;
  readonly #foreground: (
    command: string,
    options?: SandboxCommandOptions,
  ) => Promise<SandboxExecutionResult>;

  constructor(
    host: DaytonaProcessHost,
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

  #pidFile(pid: number): string {
    return `${this.#host.stateDir}/procs/${pid}.pid`;
  }

  async #start(command: string, o: SandboxCommandOptions): Promise<CommandHandle> {
    if (typeof command !== "string" || command.length === 0)
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    if (o.tag !== undefined && (typeof o.tag !== "string" || o.tag.length > 255))
      throw new SandboxError("tag must be a string of at most 255 characters", "INVALID_ARGUMENT");
    if (o.stdin !== undefined && typeof o.stdin !== "string")
      throw new SandboxError("stdin must be a string", "INVALID_ARGUMENT");
    const cwd = virtualPath(o.cwd ?? this.#host.workingDirectory);
    this.#host.alive();
    const pid = randomInt(1, 2 ** 31 - 1);
    const sessionId = `${SESSION_PREFIX}${pid}`;
    const meta: Meta = {
      command,
      cwd,
      ...(o.tag !== undefined ? { tag: o.tag } : {}),
      startedAt: new Date().toISOString(),
    };
    const exports = Object.entries(o.envs ?? {})
      .map(([k, v]) => `export ${k}=${shq(v)}; `)
      .join("");
    const pidFile = this.#pidFile(pid);
    // A subshell (nothing leaks into the session), then a process of its own group (setsid) that
    // records its pid and becomes the command: signals reach it and everything it starts.
    const script =
      `${META_MARK}${Buffer.from(JSON.stringify(meta)).toString("base64")}; ` +
      `(mkdir -p ${shq(`${this.#host.stateDir}/procs`)} && cd ${shq(cwd)} || exit 1; ${exports}` +
      `exec setsid sh -c 'echo $$ > "$1"; exec sh -c "$2"' sandpit ${shq(pidFile)} ${shq(command)})`;
    const proc = this.#host.sandbox.process;
    let cmdId: string;
    try {
      await proc.createSession(sessionId);
      ({ cmdId } = await proc.executeSessionCommand(sessionId, {
        command: script,
        runAsync: true,
      }));
    } catch (err) {
      await proc.deleteSession(sessionId).catch(() => undefined);
      throw fromDaytona(err, "starting a background command");
    }
    const handle = new DaytonaCommandHandle(this, pid, sessionId, cmdId, {
      ...(o.onStdout ? { onStdout: o.onStdout } : {}),
      ...(o.onStderr ? { onStderr: o.onStderr } : {}),
    });
    if (o.stdin) await handle.sendStdin(o.stdin);
    return handle;
  }

  async list(): Promise<ProcessInfo[]> {
    this.#host.alive();
    let sessions;
    try {
      sessions = await this.#host.sandbox.process.listSessions();
    } catch (err) {
      throw fromDaytona(err, "listing sessions");
    }
    return sessions.flatMap((s) => {
      const pid = Number(s.sessionId.slice(SESSION_PREFIX.length));
      const cmd = s.commands?.[0];
      const meta = cmd ? parseMeta(cmd.command) : undefined;
      if (!s.sessionId.startsWith(SESSION_PREFIX) || !meta || !(pid > 0)) return [];
      return [
        {
          pid,
          command: meta.command,
          cwd: meta.cwd,
          ...(meta.tag !== undefined ? { tag: meta.tag } : {}),
          pty: false,
          startedAt: new Date(meta.startedAt),
          ...(typeof cmd?.exitCode === "number" ? { exitCode: cmd.exitCode } : {}),
        },
      ];
    });
  }

  /** The session command behind a pid: NOT_FOUND when there is none. */
  async command(pid: number): Promise<{ sessionId: string; cmdId: string; exitCode?: number }> {
    checkPid(pid);
    this.#host.alive();
    const sessionId = `${SESSION_PREFIX}${pid}`;
    let cmd;
    try {
      cmd = (await this.#host.sandbox.process.getSession(sessionId)).commands?.[0];
    } catch (err) {
      throw fromDaytona(err, `finding process ${pid}`);
    }
    if (!cmd) throw new SandboxError(`no process ${pid}`, "NOT_FOUND");
    return {
      sessionId,
      cmdId: cmd.id,
      ...(typeof cmd.exitCode === "number" ? { exitCode: cmd.exitCode } : {}),
    };
  }

  async connect(pid: number, o: CommandConnectOptions = {}): Promise<CommandHandle> {
    let offset = o.offset ?? 0;
    if (offset !== "end" && (!Number.isInteger(offset) || offset < 0))
      throw new SandboxError('offset must be a non-negative integer or "end"', "INVALID_ARGUMENT");
    if (o.signal?.aborted) throw abortReason(o.signal);
    const { sessionId, cmdId } = await this.command(pid);
    if (offset === "end" || offset > 0) {
      // The log so far (it only grows): an offset past its end is no offset of this output,
      // and its end is where "end" follows from.
      let logged: { stdout: string; stderr: string };
      try {
        const r = await this.#host.sandbox.process.getSessionCommandLogs(sessionId, cmdId);
        logged = { stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
      } catch (err) {
        throw fromDaytona(err, `reading the output of process ${pid}`);
      }
      const size = Buffer.byteLength(logged.stdout) + Buffer.byteLength(logged.stderr);
      if (offset === "end") offset = size;
      else if (offset > size)
        throw new SandboxError(
          `offset ${offset} is past the end of process ${pid}'s output (${size} bytes)`,
          "INVALID_ARGUMENT",
        );
    }
    const handle = new DaytonaCommandHandle(this, pid, sessionId, cmdId, {
      offset,
      ...(o.onStdout ? { onStdout: o.onStdout } : {}),
      ...(o.onStderr ? { onStderr: o.onStderr } : {}),
    });
    o.signal?.addEventListener("abort", () => void handle.disconnect(), { once: true });
    return handle;
  }

  async kill(pid: number, signal: ProcessSignal = "SIGKILL"): Promise<boolean> {
    checkSignal(signal);
    const cmd = await this.command(pid);
    if (cmd.exitCode !== undefined) return false;
    const pidFile = shq(this.#pidFile(pid));
    // The whole group the command leads (setsid made it a leader). A command started a moment
    // ago may not have written its pid yet: wait for it, 5 s at most.
    const r = await this.#host.exec(
      `i=0; while [ ! -s ${pidFile} ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; ` +
        `p=$(cat ${pidFile} 2>/dev/null) && [ -n "$p" ] && kill -s ${signal.slice(3)} -- "-$p"`,
      { cwd: "/", timeoutMs: 30_000 },
    );
    return r.exitCode === 0;
  }

  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    let text: string;
    if (typeof data === "string") text = data;
    else if (data instanceof Uint8Array) {
      try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(data);
      } catch {
        throw new SandboxError(
          "Daytona takes a command's input as text: these bytes are not UTF-8",
          "INVALID_ARGUMENT",
        );
      }
    } else
      throw new SandboxError("stdin data must be a string or a Uint8Array", "INVALID_ARGUMENT");
    const { sessionId, cmdId, exitCode } = await this.command(pid);
    if (exitCode !== undefined) throw new SandboxError(`process ${pid} has exited`, "CONFLICT");
    try {
      await this.#host.sandbox.process.sendSessionCommandInput(sessionId, cmdId, text);
    } catch (err) {
      throw fromDaytona(err, `writing to the stdin of process ${pid}`);
    }
  }

  async closeStdin(pid: number): Promise<void> {
    checkPid(pid);
    throw notSupported("Daytona", "closing a background command's stdin");
  }

  /** Follows a command's log (from its start) until it ends; resolves with its exit code. */
  async follow(
    sessionId: string,
    cmdId: string,
    onStdout: (d: string) => void,
    onStderr: (d: string) => void,
  ): Promise<number> {
    const proc = this.#host.sandbox.process;
    try {
      await proc.getSessionCommandLogs(sessionId, cmdId, onStdout, onStderr);
    } catch (err) {
      const inner =
        !(err instanceof Error) && err && typeof err === "object" && "error" in err
          ? (err as { error: unknown }).error
          : err;
      throw fromDaytona(inner, "streaming a background command's output");
    }
    // The daemon records the exit code as the stream ends (bounded wait).
    for (let i = 0; i < 50; i++) {
      const code = (await proc.getSessionCommand(sessionId, cmdId).catch(() => undefined))
        ?.exitCode;
      if (typeof code === "number") return code;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new SandboxError(
      "Daytona: the command's output ended but it reported no exit code",
      "CONNECTION_FAILED",
    );
  }
}

function parseMeta(command: string): Meta | undefined {
  if (!command.startsWith(META_MARK)) return undefined;
  const b64 = command.slice(META_MARK.length).split(";", 1)[0]!;
  try {
    return JSON.parse(Buffer.from(b64, "base64").toString("utf8")) as Meta;
  } catch {
    return undefined;
  }
}

/**
 * A handle on a background command. The log stream replays from the start; `offset` skips that
 * many bytes of the combined output. `disconnect` stops the callbacks (the SDK's stream cannot
 * be closed early; it ends with the command).
 */
class DaytonaCommandHandle implements CommandHandle {
  readonly pid: number;
  readonly droppedBytes = 0;
  stdout = "";
  stderr = "";
  readonly #commands: DaytonaCommands;
  readonly #result: Promise<SandboxExecutionResult>;
  #disconnected = false;

  constructor(
    commands: DaytonaCommands,
    pid: number,
    sessionId: string,
    cmdId: string,
    o: { offset?: number; onStdout?: (d: string) => void; onStderr?: (d: string) => void },
  ) {
    this.#commands = commands;
    this.pid = pid;
    let skip = o.offset ?? 0;
    const take = (d: string): string => {
      if (skip <= 0) return d;
      const b = Buffer.from(d);
      const rest = b.subarray(Math.min(skip, b.length)).toString();
      skip -= b.length;
      return rest;
    };
    const deliver = (kind: "stdout" | "stderr", cb?: (d: string) => void) => (d: string) => {
      const rest = take(d);
      if (!rest || this.#disconnected) return;
      this[kind] += rest;
      cb?.(rest);
    };
    this.#result = commands
      .follow(sessionId, cmdId, deliver("stdout", o.onStdout), deliver("stderr", o.onStderr))
      .then((exitCode) => ({ exitCode, stdout: this.stdout, stderr: this.stderr }));
    this.#result.catch(() => undefined);
  }

  wait(): Promise<SandboxExecutionResult> {
    if (this.#disconnected)
      return Promise.reject(
        new SandboxError(
          `this handle was disconnected from process ${this.pid}; connect again to wait for it`,
          "CONFLICT",
        ),
      );
    return this.#result;
  }
  kill(signal?: ProcessSignal): Promise<boolean> {
    return this.#commands.kill(this.pid, signal);
  }
  sendStdin(data: string | Uint8Array): Promise<void> {
    return this.#commands.sendStdin(this.pid, data);
  }
  closeStdin(): Promise<void> {
    return this.#commands.closeStdin(this.pid);
  }
  async disconnect(): Promise<void> {
    this.#disconnected = true;
  }
}
