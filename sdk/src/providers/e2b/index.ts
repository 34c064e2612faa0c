/**
 * The E2B provider, on the official `e2b` and `@e2b/code-interpreter` SDKs.
 *
 * How the contract maps onto E2B:
 *  - one Sandpit thread is one E2B sandbox, found again through its metadata
 *    (`sandpit-user`, `sandpit-thread`) with `Sandbox.list`; the sandbox keeps its ID across
 *    pause and resume, and `resume` is `Sandbox.connect`, which resumes a paused sandbox;
 *  - /mnt/user-data/{workspace,uploads,outputs} is created (as root, then handed to the image
 *    user) when the sandbox is created, and every path is checked on the client;
 *  - commands run through envd; a non-zero exit (CommandExitError) is a result, stdin is sent
 *    through the process's stdin pipe, and a command that passes its deadline is killed;
 *  - code runs in the code interpreter's kernel (`runCode`), TypeScript inlined as the cell
 *    source, one kernel context per language and working directory;
 *  - packages are installed with pip / npm in the sandbox before `create` resolves.
 */
import { FilesystemExtras, foregroundCommands, noCodeContexts, noPty } from "../../unsupported.ts";
import { Sandbox, type Context, type ConnectionOpts } from "@e2b/code-interpreter";
import { CommandExitError, FileType, TimeoutError } from "e2b";
import type { Logger } from "pino";
import { z } from "zod";
import { E2BProviderOptions } from "./options.ts";
import { DEFAULT_TIMEOUT_MS, ID_PATTERN, parseOutput } from "@sandpit/sandboxd/protocol";
import { SandboxError } from "../../errors.ts";
import { parseOptions } from "../../parse-options.ts";
import { checkPort } from "../../validate.ts";
import type {
  CodeExecutionOptions,
  CodeExecutionResult,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxCreateOptions,
  SandboxExecutionResult,
  SandboxFileInfo,
  SandboxFilesystem,
  SandboxInstance,
  SandboxLanguage,
  SandboxProvider,
} from "../../types.ts";
import {
  createForThread,
  checkEnvs,
  elapsed,
  INSTALL_TIMEOUT_MS,
  installCommand,
  installFailed,
  META,
  shq,
  stripAnsi,
  VIRTUAL_LAYOUT,
  VIRTUAL_ROOT,
  VIRTUAL_WORKSPACE,
  virtualPath,
} from "../cloud-common.ts";
import { fromE2B } from "./errors.ts";

/** Re-exported so the provider's entry point carries its options schema. */
export { E2BProviderOptions };

type Options = z.output<typeof E2BProviderOptions>;

/** The default template for the code interpreter SDK. */
const DEFAULT_TEMPLATE = "code-interpreter-v1";

interface Defaults {
  language: SandboxLanguage;
  workingDirectory: string;
  timeoutMs: number | undefined;
  hostTemplate: string;
}

export class E2BProvider implements SandboxProvider {
  readonly options: Options;
  private readonly logger: Logger | undefined;
  /** Creates in flight per thread, so two concurrent creates in one process share a sandbox. */
  private readonly pending = new Map<string, Promise<E2BInstance>>();

  constructor(options: E2BProviderOptions, logger?: Logger) {
    this.options = parseOptions(E2BProviderOptions, options, "e2b provider options");
    this.logger = logger;
  }

  /** Connection options every SDK call gets: explicit, so no E2B_* environment leaks in. */
  connection(): ConnectionOpts {
    const o = this.options;
    return {
      apiKey: o.apiKey,
      ...(o.apiUrl ? { apiUrl: o.apiUrl } : {}),
      ...(o.sandboxUrl ? { sandboxUrl: o.sandboxUrl } : {}),
      ...(o.domain ? { domain: o.domain } : {}),
      ...(o.requestTimeoutMs ? { requestTimeoutMs: o.requestTimeoutMs } : {}),
      debug: false,
    } as ConnectionOpts;
  }

  create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    return createForThread(this.pending, options, (o, userId, threadId, workingDirectory) =>
      this.findOrCreate(o, userId, threadId, workingDirectory),
    );
  }

  private async findOrCreate(
    o: SandboxCreateOptions,
    userId: string,
    threadId: string,
    workingDirectory: string,
  ): Promise<E2BInstance> {
    const found = await this.findThread(userId, threadId);
    if (found) {
      this.logger?.debug(
        { sandboxId: found, userId, threadId },
        "reusing the thread's E2B sandbox",
      );
      const inst = await this.connect(found);
      await inst.setup(o.language, o.packages, workingDirectory);
      return inst;
    }
    let sbx: Sandbox;
    try {
      sbx = await Sandbox.create(this.options.templateId ?? DEFAULT_TEMPLATE, {
        ...this.connection(),
        timeoutMs: this.options.timeoutMs,
        envs: o.envs ?? {},
        metadata: {
          [META.user]: userId,
          [META.thread]: threadId,
          [META.language]: o.language,
          [META.workdir]: workingDirectory,
          ...(o.timeoutMs ? { [META.timeoutMs]: String(o.timeoutMs) } : {}),
        },
      });
    } catch (err) {
      throw fromE2B(err, "creating a sandbox");
    }
    const inst = new E2BInstance(sbx, {
      language: o.language,
      workingDirectory,
      timeoutMs: o.timeoutMs,
      hostTemplate: this.options.hostTemplate,
    });
    try {
      await inst.layout();
      await inst.setup(o.language, o.packages, workingDirectory);
    } catch (err) {
      // A sandbox that never became usable is not left running (and billed).
      await sbx.kill().catch(() => undefined);
      throw err;
    }
    this.logger?.debug({ sandboxId: sbx.sandboxId, userId, threadId }, "created an E2B sandbox");
    return inst;
  }

  /** The running or paused sandbox of a thread, by metadata. */
  private async findThread(userId: string, threadId: string): Promise<string | undefined> {
    if (!ID_PATTERN.test(userId) || !ID_PATTERN.test(threadId)) return undefined;
    try {
      const pages = Sandbox.list({
        ...this.connection(),
        query: {
          metadata: { [META.user]: userId, [META.thread]: threadId },
          state: ["running", "paused"],
        },
        limit: 10,
      });
      for (let page = 0; page < 5 && pages.hasNext; page++) {
        const items = await pages.nextItems();
        const hit = items.find(
          (s) => s.metadata[META.user] === userId && s.metadata[META.thread] === threadId,
        );
        if (hit) return hit.sandboxId;
      }
      return undefined;
    } catch (err) {
      throw fromE2B(err, "looking up the thread's sandbox");
    }
  }

  async resume(sandboxId: string): Promise<SandboxInstance> {
    if (typeof sandboxId !== "string" || !sandboxId)
      throw new SandboxError("sandboxId is required", "NOT_FOUND");
    return this.connect(sandboxId);
  }

  /** Connects to (and, if paused, resumes) a sandbox and restores its Sandpit defaults. */
  private async connect(sandboxId: string): Promise<E2BInstance> {
    try {
      const sbx = await Sandbox.connect(sandboxId, {
        ...this.connection(),
        timeoutMs: this.options.timeoutMs,
      });
      const info = await sbx.getInfo();
      const m = info.metadata ?? {};
      const timeoutMs = Number(m[META.timeoutMs]);
      return new E2BInstance(sbx, {
        language: m[META.language] === "typescript" ? "typescript" : "python",
        workingDirectory: m[META.workdir] || VIRTUAL_WORKSPACE,
        timeoutMs: Number.isFinite(timeoutMs) && timeoutMs > 0 ? timeoutMs : undefined,
        hostTemplate: this.options.hostTemplate,
      });
    } catch (err) {
      throw fromE2B(err, `resuming sandbox ${sandboxId}`);
    }
  }
}

const NO_CONTEXTS = noCodeContexts("E2B");

export class E2BInstance implements SandboxInstance {
  readonly pty = noPty("E2B");
  readonly createCodeContext = NO_CONTEXTS.createCodeContext;
  readonly listCodeContexts = NO_CONTEXTS.listCodeContexts;
  readonly removeCodeContext = NO_CONTEXTS.removeCodeContext;
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;
  readonly sandbox: Sandbox;
  private readonly defaults: Defaults;
  private killed = false;
  private readonly contexts = new Map<string, Promise<Context>>();

  constructor(sandbox: Sandbox, defaults: Defaults) {
    this.sandbox = sandbox;
    this.sandboxId = sandbox.sandboxId;
    this.defaults = defaults;
    this.commands = foregroundCommands("E2B", (command, options) => this.run(command, options));
    this.filesystem = new E2BFilesystem(this);
  }

  /** Throws NOT_FOUND once this handle killed its sandbox. */
  alive(): void {
    if (this.killed)
      throw new SandboxError(`E2B sandbox ${this.sandboxId} was killed`, "NOT_FOUND");
  }

  /** Creates /mnt/user-data as root and gives it to the image's default user. */
  async layout(): Promise<void> {
    const dirs = VIRTUAL_LAYOUT.map(shq).join(" ");
    const cmd = `mkdir -p ${dirs} && if id user >/dev/null 2>&1; then chown -R user:user ${shq(VIRTUAL_ROOT)}; fi`;
    const r = await this.exec(cmd, { user: "root", timeoutMs: 60_000, cwd: "/" });
    if (r.exitCode !== 0)
      throw new SandboxError(
        `E2B: could not create ${VIRTUAL_ROOT}: ${r.stderr.trim()}`,
        "EXECUTION_FAILED",
      );
  }

  /** The per-create steps: working directory and packages (pip / npm, in the sandbox). */
  async setup(
    language: SandboxLanguage,
    packages: string[] | undefined,
    workingDirectory: string,
  ): Promise<void> {
    if (workingDirectory !== VIRTUAL_WORKSPACE) await this.filesystem.mkdir(workingDirectory);
    if (!packages?.length) return;
    // npm installs into the home directory, where the kernel resolves bare imports from.
    const cmd =
      language === "python"
        ? installCommand("python", packages)
        : `cd "$HOME" && ${installCommand("typescript", packages)}`;
    const r = await this.exec(cmd, { timeoutMs: INSTALL_TIMEOUT_MS, cwd: VIRTUAL_WORKSPACE });
    if (r.exitCode !== 0) throw installFailed(packages, r);
  }

  private async run(
    command: string,
    o: SandboxCommandOptions = {},
  ): Promise<SandboxExecutionResult> {
    if (typeof command !== "string" || command.length === 0)
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    const cwd = virtualPath(o.cwd ?? this.defaults.workingDirectory);
    return this.exec(command, {
      cwd,
      envs: o.envs,
      timeoutMs: o.timeoutMs ?? this.defaults.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      stdin: o.stdin,
      onStdout: o.onStdout,
      onStderr: o.onStderr,
    });
  }

  /**
   * Runs a command through envd. Started in the background so its stdin can be written and
   * closed, then awaited; a non-zero exit is a result; past its deadline it is killed.
   */
  async exec(
    command: string,
    o: {
      cwd: string;
      envs?: Record<string, string> | undefined;
      timeoutMs: number;
      stdin?: string | undefined;
      user?: string;
      onStdout?: ((d: string) => void) | undefined;
      onStderr?: ((d: string) => void) | undefined;
    },
  ): Promise<SandboxExecutionResult> {
    this.alive();
    const started = performance.now();
    let handle;
    try {
      handle = await this.sandbox.commands.run(command, {
        background: true,
        cwd: o.cwd,
        envs: o.envs ?? {},
        timeoutMs: o.timeoutMs,
        stdin: o.stdin !== undefined,
        ...(o.user ? { user: o.user } : {}),
        ...(o.onStdout ? { onStdout: o.onStdout } : {}),
        ...(o.onStderr ? { onStderr: o.onStderr } : {}),
      });
    } catch (err) {
      throw fromE2B(err, "starting a command");
    }
    try {
      if (o.stdin !== undefined) {
        if (o.stdin.length) await handle.sendStdin(o.stdin);
        await handle.closeStdin();
      }
      const r = await handle.wait();
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      if (err instanceof CommandExitError)
        return { exitCode: err.exitCode, stdout: err.stdout, stderr: err.stderr };
      if (err instanceof TimeoutError) {
        // envd keeps a process whose stream ended; kill it so the deadline really stops it.
        await handle.kill().catch(() => undefined);
        throw new SandboxError(
          `command timed out after ${elapsed(started)} ms and was killed: ${command.slice(0, 200)}`,
          "TIMEOUT",
          err,
        );
      }
      await handle.kill().catch(() => undefined);
      throw fromE2B(err, "running a command");
    }
  }

  async executeCode(
    code: string,
    language: SandboxLanguage,
    o: CodeExecutionOptions = {},
  ): Promise<CodeExecutionResult> {
    if (language !== "python" && language !== "typescript") {
      throw new SandboxError(
        `unknown language ${JSON.stringify(language)}: use "python" or "typescript"`,
        "INVALID_ARGUMENT",
      );
    }
    if (typeof code !== "string")
      throw new SandboxError("code must be a string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    this.alive();
    const cwd = virtualPath(o.cwd ?? this.defaults.workingDirectory);
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const context = await this.context(language, cwd);
    const started = performance.now();
    let execution;
    try {
      // TypeScript goes to the kernel inline, as the cell's source: its kernel cannot import
      // ESM files, so nothing is written to disk first.
      execution = await this.sandbox.runCode(code, {
        context,
        timeoutMs,
        ...(o.envs ? { envs: o.envs } : {}),
      });
    } catch (err) {
      if (err instanceof TimeoutError) {
        // The kernel keeps running a cell whose client gave up; restart it so the next cell runs.
        await this.sandbox.restartCodeContext(context).catch(() => undefined);
        throw new SandboxError(
          `code execution exceeded its timeout of ${timeoutMs} ms and was stopped`,
          "TIMEOUT",
          err,
        );
      }
      throw fromE2B(err, "running code");
    }
    const stdout = execution.logs.stdout.join("");
    const stderr = execution.logs.stderr.join("");
    const e = execution.error;
    // IPython reports sys.exit(0) as SystemExit too; that is a clean exit, not a failure.
    const cleanExit = e?.name === "SystemExit" && ["0", "None", ""].includes(e.value.trim());
    const result: CodeExecutionResult = {
      success: !e || cleanExit,
      stdout,
      stderr,
      durationMs: elapsed(started),
      results: [],
    };
    const output = parseOutput(stdout);
    if (output !== undefined) result.output = output;
    if (e && !cleanExit) {
      const traceback = stripAnsi(e.traceback ?? "");
      result.error = { name: e.name, message: e.value, ...(traceback ? { traceback } : {}) };
    }
    return result;
  }

  /** One kernel context per (language, working directory), created on first use. */
  private context(language: SandboxLanguage, cwd: string): Promise<Context> {
    const key = `${language}:${cwd}`;
    let ctx = this.contexts.get(key);
    if (!ctx) {
      ctx = this.sandbox.createCodeContext({ language, cwd }).catch((err: unknown) => {
        this.contexts.delete(key);
        throw fromE2B(err, "creating a code context");
      });
      this.contexts.set(key, ctx);
    }
    return ctx;
  }

  async kill(): Promise<void> {
    if (this.killed) return;
    try {
      await this.sandbox.kill(); // false when it is already gone: same outcome
    } catch (err) {
      throw fromE2B(err, `killing sandbox ${this.sandboxId}`);
    }
    this.killed = true;
  }

  async pause(): Promise<void> {
    this.alive();
    try {
      await this.sandbox.pause(); // false when it is already paused: same outcome
    } catch (err) {
      throw fromE2B(err, `pausing sandbox ${this.sandboxId}`);
    }
    this.contexts.clear();
  }

  async getHost(port: number): Promise<string> {
    checkPort(port);
    this.alive();
    return this.defaults.hostTemplate
      .replaceAll("{host}", this.sandbox.getHost(port))
      .replaceAll("{port}", String(port))
      .replaceAll("{sandboxId}", this.sandboxId);
  }
}

class E2BFilesystem extends FilesystemExtras implements SandboxFilesystem {
  private readonly inst: E2BInstance;
  constructor(inst: E2BInstance) {
    super("E2B");
    this.inst = inst;
  }

  private get files() {
    this.inst.alive();
    return this.inst.sandbox.files;
  }

  async read(path: string): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path));
  }

  async readBytes(path: string): Promise<Uint8Array> {
    const p = virtualPath(path);
    try {
      return await this.files.read(p, { format: "bytes" });
    } catch (err) {
      throw fromE2B(err, `reading ${p}`);
    }
  }

  async write(path: string, content: string | Uint8Array): Promise<void> {
    if (typeof content !== "string" && !(content instanceof Uint8Array)) {
      throw new SandboxError("content must be a string or a Uint8Array", "INVALID_ARGUMENT");
    }
    const p = virtualPath(path);
    const data =
      typeof content === "string"
        ? content
        : (content.buffer.slice(
            content.byteOffset,
            content.byteOffset + content.byteLength,
          ) as ArrayBuffer);
    try {
      await this.files.write(p, data);
    } catch (err) {
      throw fromE2B(err, `writing ${p}`);
    }
  }

  async list(path: string, options?: { depth?: number }): Promise<SandboxFileInfo[]> {
    this.oneLevel(options);
    const p = virtualPath(path);
    try {
      const entries = await this.files.list(p, { depth: 1 });
      return entries.map((e) => ({
        name: e.name,
        path: e.path,
        type:
          e.type === FileType.DIR
            ? "dir"
            : e.type === FileType.FILE
              ? "file"
              : e.type === ("symlink" as FileType)
                ? "symlink"
                : "other",
        size: Number(e.size),
        ...(e.modifiedTime ? { modifiedTime: new Date(e.modifiedTime) } : {}),
      }));
    } catch (err) {
      throw fromE2B(err, `listing ${p}`);
    }
  }

  async exists(path: string): Promise<boolean> {
    const p = virtualPath(path);
    try {
      return await this.files.exists(p);
    } catch (err) {
      throw fromE2B(err, `checking ${p}`);
    }
  }

  async mkdir(path: string): Promise<void> {
    const p = virtualPath(path);
    try {
      await this.files.makeDir(p); // false when it already exists: fine
    } catch (err) {
      throw fromE2B(err, `creating directory ${p}`);
    }
  }

  async remove(path: string): Promise<void> {
    const p = virtualPath(path);
    if (p === VIRTUAL_ROOT)
      throw new SandboxError(`refusing to remove ${VIRTUAL_ROOT} itself`, "INVALID_ARGUMENT");
    // envd removes like `rm -rf` and says nothing about a missing path; the contract wants NOT_FOUND.
    if (!(await this.exists(p)))
      throw new SandboxError(`no such file or directory: ${p}`, "NOT_FOUND");
    try {
      await this.files.remove(p);
    } catch (err) {
      throw fromE2B(err, `removing ${p}`);
    }
  }
}
