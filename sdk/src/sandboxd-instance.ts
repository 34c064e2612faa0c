/**
 * A SandboxInstance backed by sandboxd. Providers that run sandboxd (local, docker, kubernetes)
 * supply only the lifecycle: how to reach it, pause it, kill it, and publish a port.
 */
import { FilesystemExtras, noCodeContexts, noPty } from "./unsupported.ts";
import { SandboxdCommands } from "./sandboxd/processes.ts";
import { LANGUAGES } from "@sandpit/sandboxd/protocol";
import { SandboxError } from "./errors.ts";
import type { SandboxdClient } from "./sandboxd-client.ts";
import { checkPort } from "./validate.ts";
import type {
  CodeExecutionOptions,
  CodeExecutionResult,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxExecutionResult,
  SandboxFileInfo,
  SandboxFilesystem,
  SandboxInstance,
  SandboxLanguage,
} from "./types.ts";

export interface SandboxdLifecycle {
  /** A client for the running sandboxd, starting it again first if the sandbox was paused. */
  connect(): Promise<SandboxdClient>;
  pause(): Promise<void>;
  kill(): Promise<void>;
  getHost(port: number): Promise<string>;
  /**
   * Explains a failure to reach sandboxd: e.g. NOT_FOUND when the container was removed from
   * outside. Without it, the CONNECTION_FAILED error stands.
   */
  diagnose?(err: SandboxError): Promise<SandboxError>;
}

/** Runs `op` against a connected client, letting the lifecycle explain connection failures. */
async function withClient<T>(
  lifecycle: SandboxdLifecycle,
  op: (c: SandboxdClient) => Promise<T>,
): Promise<T> {
  try {
    return await op(await lifecycle.connect());
  } catch (err) {
    if (err instanceof SandboxError && err.code === "CONNECTION_FAILED" && lifecycle.diagnose) {
      throw await lifecycle.diagnose(err);
    }
    throw err;
  }
}

export interface SandboxDefaults {
  workingDirectory?: string | undefined;
  timeoutMs?: number | undefined;
}

const NO_CONTEXTS = noCodeContexts("sandboxd");

export class SandboxdInstance implements SandboxInstance {
  readonly pty = noPty("sandboxd");
  readonly createCodeContext = NO_CONTEXTS.createCodeContext;
  readonly listCodeContexts = NO_CONTEXTS.listCodeContexts;
  readonly removeCodeContext = NO_CONTEXTS.removeCodeContext;
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;
  private readonly lifecycle: SandboxdLifecycle;
  private readonly defaults: SandboxDefaults;

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
    const r = await withClient(this.lifecycle, (client) =>
      client.executeCode({
        language,
        code,
        ...pick({
          cwd: o.cwd ?? this.defaults.workingDirectory,
          env: o.envs,
          timeoutMs: o.timeoutMs ?? this.defaults.timeoutMs,
        }),
      }),
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
}

class SandboxdFilesystem extends FilesystemExtras implements SandboxFilesystem {
  private readonly with: <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>;
  constructor(withClient: <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>) {
    super("sandboxd");
    this.with = withClient;
  }

  async read(path: string): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path));
  }

  readBytes(path: string): Promise<Uint8Array> {
    return this.with((c) => c.readFile(path));
  }

  async write(path: string, content: string | Uint8Array): Promise<void> {
    if (typeof content !== "string" && !(content instanceof Uint8Array)) {
      throw new SandboxError("content must be a string or a Uint8Array", "INVALID_ARGUMENT");
    }
    await this.with((c) => c.writeFile(path, content));
  }

  async list(path: string): Promise<SandboxFileInfo[]> {
    const { entries } = await this.with((c) => c.list(path, 1));
    return entries.map((e) => ({
      name: e.name,
      path: e.path,
      type: e.type,
      size: e.size,
      modifiedTime: new Date(e.modifiedMs),
    }));
  }

  exists(path: string): Promise<boolean> {
    // NOT_FOUND is caught inside the call, so only sandboxd's "no such file" means false; a
    // sandbox that is gone still surfaces as an error.
    return this.with(async (c) => {
      try {
        await c.stat(path);
        return true;
      } catch (err) {
        if (err instanceof SandboxError && err.code === "NOT_FOUND") return false;
        throw err;
      }
    });
  }

  mkdir(path: string): Promise<void> {
    return this.with((c) => c.mkdir(path));
  }

  remove(path: string): Promise<void> {
    return this.with((c) => c.remove(path, true));
  }
}

/** Drops undefined fields so requests stay minimal and strict schemas stay happy. */
function pick<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
