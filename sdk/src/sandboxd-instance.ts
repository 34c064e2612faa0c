/**
 * A SandboxInstance backed by sandboxd. Providers that run sandboxd (local, docker, kubernetes)
 * supply only the lifecycle: how to reach it, pause it, kill it, and publish a port.
 */
import { SandboxdCodeContexts } from "./sandboxd/contexts.ts";
import { SandboxdFilesystem } from "./sandboxd/filesystem.ts";
import { SandboxdCommands } from "./sandboxd/processes.ts";
import { LANGUAGES } from "@sandpit/sandboxd/wire";
import { SandboxError } from "./errors.ts";
import type { SandboxdClient, SandboxdConnection } from "./sandboxd-client.ts";
import { SandboxdPty } from "./sandboxd/pty.ts";
import { checkPort } from "./validate.ts";
import type {
  CodeContext,
  CodeContextOptions,
  CodeExecutionOptions,
  CodeExecutionResult,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
  SandboxFilesystem,
  SandboxInfo,
  SandboxInstance,
  SandboxLanguage,
  SandboxPty,
  SandboxUrl,
} from "./types.ts";

export interface SandboxdLifecycle {
  /** A client for the running sandboxd, starting it again first if the sandbox was paused. */
  connect(): Promise<SandboxdClient>;
  pause(): Promise<void>;
  kill(): Promise<void>;
  getHost(port: number): Promise<string>;
  /** A full URL for `port`; `http://` + getHost when the lifecycle has no URL of its own. */
  getUrl?(port: number): Promise<SandboxUrl>;
  /** Ends the sandbox `timeoutMs` from now (validated). */
  setTimeout(timeoutMs: number): Promise<void>;
  /** What the provider knows about the sandbox, read without side effects. */
  info(): Promise<SandboxInfo>;
  /**
   * Explains a failure to reach sandboxd: e.g. NOT_FOUND when the container was removed from
   * outside. Without it, the CONNECTION_FAILED error stands.
   */
  diagnose?(err: SandboxError): Promise<SandboxError>;
  /**
   * Whether a call that failed with `err` may be made again, on a sandboxd the next connect
   * starts: true only when it is certain that sandboxd ran none of it (it had drained: stopped
   * itself while idle, see DRAIN_PATH in @sandpit/sandboxd/protocol). `sentAt` is when the
   * call was sent, after its connect; undefined when the connect itself failed.
   */
  recover?(err: SandboxError, sentAt: number | undefined): Promise<boolean>;
}

/** Calls made again after a drain, at most: each needs the sandbox to drain again meanwhile. */
const MAX_RECOVERIES = 3;

/**
 * Runs `op` against a connected client, again on a restarted sandboxd when the lifecycle says it
 * never ran (the idle reaper stopped the sandbox as the call went out), and lets the lifecycle
 * explain connection failures.
 */
export async function withClient<T>(
  lifecycle: SandboxdLifecycle,
  op: (c: SandboxdClient) => Promise<T>,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    let sentAt: number | undefined;
    try {
      const client = await lifecycle.connect();
      sentAt = Date.now();
      return await op(client);
    } catch (err) {
      if (
        err instanceof SandboxError &&
        attempt < MAX_RECOVERIES &&
        lifecycle.recover &&
        (await lifecycle.recover(err, sentAt))
      )
        continue;
      if (err instanceof SandboxError && err.code === "CONNECTION_FAILED" && lifecycle.diagnose) {
        throw await lifecycle.diagnose(err);
      }
      throw err;
    }
  }
}

export interface SandboxDefaults {
  /** The sandbox's language, a code context's default (python when the provider does not say). */
  language?: SandboxLanguage | undefined;
  workingDirectory?: string | undefined;
  timeoutMs?: number | undefined;
}

export class SandboxdInstance implements SandboxInstance {
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;
  readonly pty: SandboxPty;
  private readonly lifecycle: SandboxdLifecycle;
  private readonly defaults: SandboxDefaults;
  private readonly contexts: SandboxdCodeContexts;

  constructor(sandboxId: string, lifecycle: SandboxdLifecycle, defaults: SandboxDefaults = {}) {
    this.sandboxId = sandboxId;
    this.lifecycle = lifecycle;
    this.defaults = defaults;
    this.commands = new SandboxdCommands({
      with: (op) => withClient(lifecycle, op),
      foreground: (command, options) => this.run(command, options),
      workingDirectory: defaults.workingDirectory,
    });
    this.filesystem = new SandboxdFilesystem((op) => withClient(lifecycle, op));
    this.pty = new SandboxdPty((op) => withClient(lifecycle, op), defaults.workingDirectory);
    this.contexts = new SandboxdCodeContexts((op) => withClient(lifecycle, op), {
      ...defaults,
      language: defaults.language ?? "python",
    });
  }

  createCodeContext(options?: CodeContextOptions): Promise<CodeContext> {
    return this.contexts.create(options);
  }

  listCodeContexts(): Promise<CodeContext[]> {
    return this.contexts.list();
  }

  removeCodeContext(context: CodeContext | string): Promise<void> {
    return this.contexts.remove(context);
  }

  private async run(
    command: string,
    o: SandboxCommandOptions = {},
  ): Promise<SandboxExecutionResult> {
    if (typeof command !== "string" || command.length === 0) {
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    }
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs;
    const streaming = o.onStdout || o.onStderr;
    const r = await withClient(this.lifecycle, (client) =>
      client.runCommand(
        {
          command,
          ...pick({
            cwd: o.cwd ?? this.defaults.workingDirectory,
            env: o.envs,
            timeoutMs,
            stdin: o.stdin,
          }),
        },
        streaming
          ? (stream, data) => (stream === "stdout" ? o.onStdout?.(data) : o.onStderr?.(data))
          : undefined,
        o.signal,
      ),
    );
    if (r.timedOut) {
      throw new SandboxError(
        `command timed out after ${r.durationMs} ms and was killed with its process group: ${command.slice(0, 200)}`,
        "TIMEOUT",
      );
    }
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  }

  async executeCode(
    code: string,
    language: SandboxLanguage,
    o: CodeExecutionOptions = {},
  ): Promise<CodeExecutionResult> {
    if (!(LANGUAGES as readonly string[]).includes(language)) {
      throw new SandboxError(
        `unknown language ${JSON.stringify(language)}: use "python" or "typescript"`,
        "INVALID_ARGUMENT",
      );
    }
    if (typeof code !== "string")
      throw new SandboxError("code must be a string", "INVALID_ARGUMENT");
    if (o.context !== undefined) return this.contexts.execute(code, language, o.context, o);
    const r = await withClient(this.lifecycle, (client) =>
      client.executeCode(
        {
          language,
          code,
          ...pick({
            cwd: o.cwd ?? this.defaults.workingDirectory,
            env: o.envs,
            timeoutMs: o.timeoutMs ?? this.defaults.timeoutMs,
          }),
        },
        o.signal,
      ),
    );
    return { ...r, results: [] };
  }

  kill(): Promise<void> {
    return this.lifecycle.kill();
  }

  pause(): Promise<void> {
    return this.lifecycle.pause();
  }

  async getHost(port: number): Promise<string> {
    checkPort(port);
    return this.lifecycle.getHost(port);
  }

  async getUrl(port: number): Promise<SandboxUrl> {
    checkPort(port);
    if (this.lifecycle.getUrl) return this.lifecycle.getUrl(port);
    return { url: `http://${await this.lifecycle.getHost(port)}`, headers: {} };
  }

  async setTimeout(timeoutMs: number): Promise<void> {
    // Loaded here: the create options' schemas (zod) are not on a command's path.
    const { validateTimeout } = await import("./create-options.ts");
    return this.lifecycle.setTimeout(validateTimeout(timeoutMs));
  }

  getInfo(): Promise<SandboxInfo> {
    return this.lifecycle.info();
  }

  /** sandboxd's address and token, starting a paused sandbox first (./sandboxd-connection.ts). */
  sandboxdConnection(): Promise<SandboxdConnection> {
    return withClient(this.lifecycle, (client) => Promise.resolve(client.connection));
  }

  /** The defaults create() gave the sandbox, for another instance over the same connection. */
  sandboxdDefaults(): SandboxDefaults {
    return { ...this.defaults };
  }
}

/** Drops undefined fields so requests stay minimal and strict schemas stay happy. */
function pick<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
