/**
 * `commands` of the sandboxd-backed providers (local, docker, kubernetes): foreground runs as
 * before, and background processes through sandboxd's /v1/processes API. A handle is one NDJSON
 * stream of the process's output (replayed from an offset or none from the end, then live, then
 * the exit line); the
 * process itself belongs to the sandbox, so a handle, its client or its connection going away
 * never stops it.
 */
import type { StartProcessRequest } from "@sandpit/sandboxd/protocol";
import type { ProcessEntry, ProcessStreamEvent } from "@sandpit/sandboxd/wire";
import { SandboxError } from "../errors.ts";
import { checkSignal } from "../validate.ts";
import { failure, fromBody, ndjson, type Body, type SandboxdClient } from "../sandboxd-client.ts";
import type {
  CommandConnectOptions,
  CommandHandle,
  ProcessInfo,
  ProcessSignal,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
} from "../types.ts";

type WithClient = <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>;
type Foreground = (
  command: string,
  options?: SandboxCommandOptions,
) => Promise<SandboxExecutionResult>;

const NDJSON = { accept: "application/x-ndjson" };

export class SandboxdCommands implements SandboxCommands {
  readonly #with: WithClient;
  readonly #foreground: Foreground;
  readonly #workingDirectory: string | undefined;

  constructor(o: {
    with: WithClient;
    foreground: Foreground;
    workingDirectory?: string | undefined;
  }) {
    this.#with = o.with;
    this.#foreground = o.foreground;
    this.#workingDirectory = o.workingDirectory;
  }

  run(
    command: string,
    options?: SandboxCommandOptions & { background?: false },
  ): Promise<SandboxExecutionResult>;
  run(
    command: string,
    options: SandboxCommandOptions & { background: true },
  ): Promise<CommandHandle>;
  run(
    command: string,
    options?: SandboxCommandOptions & { background?: boolean },
  ): Promise<SandboxExecutionResult | CommandHandle> {
    if (!options?.background) return this.#foreground(command, options);
    return this.#start(command, options);
  }

  async list(): Promise<ProcessInfo[]> {
    const { processes } = await this.#with((c) =>
      c.json<{ processes: ProcessEntry[] }>("GET", "/v1/processes"),
    );
    return processes.map(toInfo);
  }

  async connect(pid: number, options: CommandConnectOptions = {}): Promise<CommandHandle> {
    checkPid(pid);
    const offset = options.offset ?? 0;
    if (offset !== "end" && (!Number.isSafeInteger(offset) || offset < 0)) {
      throw new SandboxError('offset must be a non-negative integer or "end"', "INVALID_ARGUMENT");
    }
    return this.#attach(`/v1/processes/${pid}/output?offset=${offset}`, undefined, options);
  }

  async kill(pid: number, signal: ProcessSignal = "SIGKILL"): Promise<boolean> {
    checkPid(pid);
    checkSignal(signal);
    const r = await this.#with((c) =>
      c.json<{ delivered: boolean }>("POST", `/v1/processes/${pid}/signal`, { signal }),
    );
    return r.delivered;
  }

  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    checkPid(pid);
    if (typeof data !== "string" && !(data instanceof Uint8Array)) {
      throw new SandboxError("stdin data must be a string or a Uint8Array", "INVALID_ARGUMENT");
    }
    await this.#with(async (c) => {
      const res = await c.send("POST", `/v1/processes/${pid}/stdin`, {
        body: data,
        headers: { "content-type": "application/octet-stream" },
        timeoutMs: 60_000,
      });
      await res.dump();
    });
  }

  async closeStdin(pid: number): Promise<void> {
    checkPid(pid);
    await this.#with(async (c) => {
      const res = await c.send("POST", `/v1/processes/${pid}/stdin/close`, { timeoutMs: 60_000 });
      await res.dump();
    });
  }

  async #start(command: string, o: SandboxCommandOptions): Promise<CommandHandle> {
    if (typeof command !== "string" || command.length === 0) {
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    }
    // The sandbox's default timeout is for runs to completion; a background process (a dev
    // server, say) runs until it ends or is killed unless this call gives it a timeout.
    const req: StartProcessRequest = { command };
    const cwd = o.cwd ?? this.#workingDirectory;
    if (cwd !== undefined) req.cwd = cwd;
    if (o.envs !== undefined) req.env = o.envs;
    if (o.timeoutMs !== undefined) req.timeoutMs = o.timeoutMs;
    if (o.stdin !== undefined) req.stdin = o.stdin;
    if (o.tag !== undefined) req.tag = o.tag;
    return this.#attach("/v1/processes", JSON.stringify(req), o);
  }

  /** Opens an output stream (a start, or an attach) and returns once sandboxd confirmed it. */
  #attach(
    path: string,
    startBody: string | undefined,
    o: Pick<CommandConnectOptions, "onStdout" | "onStderr" | "signal">,
  ): Promise<CommandHandle> {
    return this.#with(async (c) => {
      const detach = new AbortController();
      const signal = o.signal ? AbortSignal.any([detach.signal, o.signal]) : detach.signal;
      const body = await c.send(startBody === undefined ? "GET" : "POST", path, {
        ...(startBody === undefined
          ? { headers: NDJSON }
          : { body: startBody, headers: { ...NDJSON, "content-type": "application/json" } }),
        timeoutMs: null,
        signal,
      });
      const events = ndjson<ProcessStreamEvent>(body);
      let first: IteratorResult<ProcessStreamEvent>;
      try {
        first = await events.next();
      } catch (err) {
        throw failure(err, `attaching to a process`, o.signal);
      }
      if (first.done || first.value.stream !== "attached") {
        detach.abort();
        if (!first.done && first.value.stream === "error") throw fromBody(first.value.error);
        throw new SandboxError("sandboxd did not confirm the attach", "CONNECTION_FAILED");
      }
      return new Handle(this, first.value, events, body, detach, o);
    });
  }
}

/** One attached output stream of a background process. */
class Handle implements CommandHandle {
  readonly pid: number;
  stdout = "";
  stderr = "";
  droppedBytes: number;
  readonly #commands: SandboxdCommands;
  readonly #detach: AbortController;
  readonly #done: Promise<SandboxExecutionResult>;

  constructor(
    commands: SandboxdCommands,
    attached: Extract<ProcessStreamEvent, { stream: "attached" }>,
    events: AsyncGenerator<ProcessStreamEvent>,
    body: Body,
    detach: AbortController,
    o: Pick<CommandConnectOptions, "onStdout" | "onStderr" | "signal">,
  ) {
    this.pid = attached.pid;
    this.droppedBytes = attached.droppedBytes;
    this.#commands = commands;
    this.#detach = detach;
    this.#done = this.#follow(events, body, o);
    // wait() hands the outcome to whoever asks; a handle nobody waits on is no unhandled rejection.
    this.#done.catch(() => undefined);
  }

  async #follow(
    events: AsyncGenerator<ProcessStreamEvent>,
    body: Body,
    o: Pick<CommandConnectOptions, "onStdout" | "onStderr" | "signal">,
  ): Promise<SandboxExecutionResult> {
    try {
      for await (const event of events) {
        switch (event.stream) {
          case "stdout":
            this.stdout += event.data;
            o.onStdout?.(event.data);
            break;
          case "stderr":
            this.stderr += event.data;
            o.onStderr?.(event.data);
            break;
          case "dropped":
            this.droppedBytes += event.bytes;
            break;
          case "error":
            throw fromBody(event.error);
          case "exit":
            if (event.timedOut) {
              throw new SandboxError(
                `background process ${this.pid} ran past its timeout and was killed with its process group`,
                "TIMEOUT",
              );
            }
            return { exitCode: event.exitCode, stdout: this.stdout, stderr: this.stderr };
        }
      }
    } catch (err) {
      if (this.#detach.signal.aborted) throw this.#detached();
      throw failure(err, `reading the output of process ${this.pid}`, o.signal);
    } finally {
      body.destroy();
    }
    if (this.#detach.signal.aborted) throw this.#detached();
    throw new SandboxError(
      `the output of process ${this.pid} ended before its exit: the sandbox was paused or stopped`,
      "CONNECTION_FAILED",
    );
  }

  #detached(): SandboxError {
    return new SandboxError(
      `the handle of process ${this.pid} was disconnected; commands.connect(${this.pid}) attaches again`,
      "CONFLICT",
    );
  }

  wait(): Promise<SandboxExecutionResult> {
    return this.#done;
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
    this.#detach.abort();
    // Resolves once the stream is closed: no callback fires after disconnect() returns.
    await this.#done.catch(() => undefined);
  }
}

function checkPid(pid: unknown): asserts pid is number {
  if (!Number.isSafeInteger(pid) || (pid as number) <= 0) {
    throw new SandboxError(
      `pid must be a positive integer, not ${JSON.stringify(pid)}`,
      "INVALID_ARGUMENT",
    );
  }
}

function toInfo(e: ProcessEntry): ProcessInfo {
  return {
    pid: e.pid,
    command: e.command,
    cwd: e.cwd,
    ...(e.tag === undefined ? {} : { tag: e.tag }),
    pty: e.pty,
    startedAt: new Date(e.startedAtMs),
    ...(e.exitCode === undefined ? {} : { exitCode: e.exitCode }),
  };
}
