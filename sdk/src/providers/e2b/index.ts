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
 *  - code runs in the code interpreter's kernels (`runCode`), TypeScript inlined as the cell
 *    source; stateless Python in one context per working directory, stateless TypeScript in
 *    the interpreter's own TypeScript context; `createCodeContext` makes contexts of the
 *    caller's, whose cells share state; a cell past its deadline or aborted is interrupted
 *    (SIGINT to its kernel) and the context lives on; a context whose kernel died is removed;
 *  - packages are installed with pip / npm in the sandbox before `create` resolves;
 *  - labels are metadata (list filters on them), `template` is the E2B template,
 *    `lifetime.ttlMs` is the sandbox timeout (setTimeout changes it), network deny/allow are
 *    E2B's egress settings; get is `Sandbox.getInfo` (a paused sandbox stays paused).
 */
import {
  Sandbox,
  type Context,
  type ConnectionOpts,
  type OutputMessage,
  type Result,
} from "@e2b/code-interpreter";
import { type CommandHandle, CommandExitError, TimeoutError } from "e2b";
import type { Logger } from "../../logger.ts";
import { z } from "zod";
import { E2BProviderOptions } from "./options.ts";
import { DEFAULT_TIMEOUT_MS, ID_PATTERN, ID_RULE, parseOutput } from "@sandpit/sandboxd/wire";
import { SandboxError } from "../../errors.ts";
import { parseOptions } from "../../parse-options.ts";
import { checkPort } from "../../validate.ts";
import { validateCreate, validateListLabels, validateTimeout } from "../../create-options.ts";
import { refuseUnsupported, userLabels } from "../../platform-options.ts";
import type {
  CodeContext,
  CodeContextOptions,
  CodeExecutionOptions,
  CodeExecutionResult,
  CodeResult,
  SandboxCommandOptions,
  SandboxCommands,
  SandboxCreateOptions,
  SandboxExecutionResult,
  SandboxFilesystem,
  SandboxInfo,
  SandboxInstance,
  SandboxLanguage,
  SandboxListOptions,
  SandboxProvider,
  SandboxPty,
  SandboxUrl,
} from "../../types.ts";
import {
  abortReason,
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
import { fromE2B, fromE2BStart } from "./errors.ts";
import { E2BFilesystem } from "./filesystem.ts";
import { E2BCommands, E2BPty, type E2BProcessHost } from "./processes.ts";
import { codeResult } from "./results.ts";

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

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    refuseUnsupported(
      "e2b",
      validateCreate(options),
      {
        ttl: true,
        template: true,
        labels: true,
        networkDeny: true,
        networkInternet: true,
        networkAllow: true,
      },
      {
        idleTimeout: "E2B ends a sandbox at its timeout only",
        cpu: "resources are the template's",
        memory: "resources are the template's",
        disk: "resources are the template's",
        mounts: "E2B volumes are not wired to mounts",
      },
    );
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
      sbx = await Sandbox.create(o.template ?? this.options.templateId ?? DEFAULT_TEMPLATE, {
        ...this.connection(),
        timeoutMs: o.lifetime?.ttlMs ?? this.options.timeoutMs,
        envs: o.envs ?? {},
        ...(o.network === "deny" ? { allowInternetAccess: false } : {}),
        ...(typeof o.network === "object"
          ? { network: { allowOut: o.network.allow, denyOut: ["0.0.0.0/0"] } }
          : {}),
        metadata: {
          ...o.labels,
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

  /** Running and paused sandboxes carrying the labels (E2B metadata); nothing is resumed. */
  async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wanted = validateListLabels(options?.labels);
    const out: SandboxInfo[] = [];
    try {
      const pages = Sandbox.list({
        ...this.connection(),
        query: { metadata: wanted, state: ["running", "paused"] },
        limit: 100,
      });
      for (let page = 0; page < LIST_PAGES && pages.hasNext; page++)
        for (const s of await pages.nextItems()) out.push(e2bInfo(s));
    } catch (err) {
      throw fromE2B(err, "listing sandboxes");
    }
    return out;
  }

  async get(sandboxId: string): Promise<SandboxInfo> {
    if (typeof sandboxId !== "string" || !sandboxId)
      throw new SandboxError("sandboxId is required", "NOT_FOUND");
    try {
      return e2bInfo(await Sandbox.getInfo(sandboxId, this.connection()));
    } catch (err) {
      throw fromE2B(err, `finding sandbox ${sandboxId}`);
    }
  }

  /** Nothing is held per sandbox between calls (each call is its own request). */
  async release(_sandboxId: string): Promise<void> {}

  async close(): Promise<void> {}

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

/**
 * How the code interpreter reports a cell whose kernel died (Jupyter restarts a dead kernel
 * with an empty namespace).
 */
const KERNEL_DIED = new Set(["DeadKernelError", "KernelDied", "KernelRestarted"]);

/** How long a timed-out cell has to stop after its interrupt before the context is restarted. */
const INTERRUPT_GRACE_MS = 5_000;

/** Bytes per stdin message (envd's messages are JSON, base64 inside). */
const STDIN_CHUNK = 1 << 20;

export class E2BInstance implements SandboxInstance, E2BProcessHost {
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;
  readonly pty: SandboxPty;
  readonly sandbox: Sandbox;
  private readonly defaults: Defaults;
  private killed = false;
  /** The contexts stateless Python `executeCode` uses, one per working directory. */
  private readonly contexts = new Map<string, Promise<Context>>();

  constructor(sandbox: Sandbox, defaults: Defaults) {
    this.sandbox = sandbox;
    this.sandboxId = sandbox.sandboxId;
    this.defaults = defaults;
    this.commands = new E2BCommands(this, (command, options) => this.run(command, options));
    this.pty = new E2BPty(this);
    this.filesystem = new E2BFilesystem(this);
  }

  get workingDirectory(): string {
    return this.defaults.workingDirectory;
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
      signal: o.signal,
    });
  }

  /**
   * Runs a command through envd. Started in the background so its stdin can be written (in
   * chunks) and closed, then awaited; a non-zero exit is a result; past its deadline, or when
   * `signal` aborts, it is killed.
   */
  async exec(
    command: string,
    o: {
      cwd: string;
      envs?: Record<string, string> | undefined;
      timeoutMs: number;
      stdin?: string | Uint8Array | undefined;
      user?: string;
      onStdout?: ((d: string) => void) | undefined;
      onStderr?: ((d: string) => void) | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<SandboxExecutionResult> {
    this.alive();
    if (o.signal?.aborted) throw abortReason(o.signal);
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
      throw fromE2BStart(err, "starting a command");
    }
    const h = handle;
    const onAbort = () => void h.kill().catch(() => undefined);
    // An abort while the command was being started fired before this listener: kill it now.
    if (o.signal?.aborted) {
      onAbort();
      throw abortReason(o.signal);
    }
    o.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (o.stdin !== undefined) {
        const data = typeof o.stdin === "string" ? new TextEncoder().encode(o.stdin) : o.stdin;
        try {
          for (let at = 0; at < data.length; at += STDIN_CHUNK)
            await h.sendStdin(data.subarray(at, at + STDIN_CHUNK));
          await h.closeStdin();
        } catch (err) {
          // A command may end without reading all its input (`cat >> dir` fails at once): as
          // with a closed pipe, its exit is the result. Anything else fails the wait below too.
          if (!(await exited(h))) throw err;
        }
      }
      const r = await h.wait();
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      if (o.signal?.aborted) throw abortReason(o.signal);
      if (err instanceof CommandExitError)
        return { exitCode: err.exitCode, stdout: err.stdout, stderr: err.stderr };
      if (err instanceof TimeoutError) {
        // envd keeps a process whose stream ended; kill it so the deadline really stops it.
        await h.kill().catch(() => undefined);
        throw new SandboxError(
          `command timed out after ${elapsed(started)} ms and was killed: ${command.slice(0, 200)}`,
          "TIMEOUT",
          err,
        );
      }
      await h.kill().catch(() => undefined);
      throw fromE2B(err, "running a command");
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
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
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    let context: Context | undefined;
    let source = code;
    if (o.context !== undefined) {
      if (o.cwd !== undefined)
        throw new SandboxError(
          "cwd cannot be given with a context (the context has its own)",
          "INVALID_ARGUMENT",
        );
      context = await this.findContext(o.context, language);
    } else if (language === "python") {
      context = await this.context(language, virtualPath(o.cwd ?? this.defaults.workingDirectory));
    } else {
      // Stateless TypeScript runs in the interpreter's own TypeScript context (one kernel for
      // the sandbox: declarations of one call would collide with the next in a context of
      // ours), moved to the call's directory first, on the cell's first line.
      const cwd = virtualPath(o.cwd ?? this.defaults.workingDirectory);
      source = `process.chdir(${JSON.stringify(cwd)}); ${code}`;
    }
    if (o.signal?.aborted) throw abortReason(o.signal);
    // envd's code interpreter has no cancel call: an abort interrupts the kernel (SIGINT, as
    // Jupyter's interrupt does), the cell ends with KeyboardInterrupt and the context lives on.
    // (A stateless TypeScript cell's kernel is not ours to find: only the request is dropped.)
    const onAbort = () => void (context && this.interrupt(context.id));
    o.signal?.addEventListener("abort", onAbort, { once: true });
    const started = performance.now();
    const results: CodeResult[] = [];
    let execution;
    try {
      // TypeScript goes to the kernel inline, as the cell's source: its kernel cannot import
      // ESM files, so nothing is written to disk first.
      execution = await this.sandbox.runCode(source, {
        ...(context ? { context } : { language: "typescript" }),
        timeoutMs,
        ...(o.envs ? { envs: o.envs } : {}),
        ...(o.onStdout ? { onStdout: (m: OutputMessage) => o.onStdout!(m.line) } : {}),
        ...(o.onStderr ? { onStderr: (m: OutputMessage) => o.onStderr!(m.line) } : {}),
        onResult: (r: Result) => {
          const mapped = codeResult(r);
          results.push(mapped);
          o.onResult?.(mapped);
        },
      });
    } catch (err) {
      if (o.signal?.aborted) throw abortReason(o.signal);
      if (err instanceof TimeoutError) {
        // The kernel keeps running a cell whose client gave up: interrupt it, as an abort does.
        if (context) await this.stopCell(context);
        throw new SandboxError(
          `code execution exceeded its timeout of ${timeoutMs} ms and was stopped`,
          "TIMEOUT",
          err,
        );
      }
      throw fromE2B(err, "running code");
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
    }
    if (o.signal?.aborted) throw abortReason(o.signal);
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
      results,
    };
    const output = parseOutput(stdout);
    if (output !== undefined) result.output = output;
    if (context && e && KERNEL_DIED.has(e.name)) {
      // The interpreter itself died: its state is gone, so the context is too.
      await this.removeCodeContext(context.id).catch(() => undefined);
      throw new SandboxError(
        `the code context's interpreter died (${e.name}: ${e.value}); the context was removed`,
        "EXECUTION_FAILED",
      );
    }
    if (e && !cleanExit) {
      const traceback = stripAnsi(e.traceback ?? "");
      result.error = { name: e.name, message: e.value, ...(traceback ? { traceback } : {}) };
    }
    return result;
  }

  /**
   * Ends a cell the client gave up on (its deadline): interrupted, the context lives on. A cell
   * that ignores the interrupt (blocked in native code) would hold the context forever, so if a
   * trivial cell cannot run soon after, the context is restarted (its state is lost then).
   */
  private async stopCell(context: Context): Promise<void> {
    await this.interrupt(context.id);
    try {
      await this.sandbox.runCode("", { context, timeoutMs: INTERRUPT_GRACE_MS });
    } catch {
      await this.sandbox.restartCodeContext(context).catch(() => undefined);
    }
  }

  /**
   * SIGINT to the context's kernel. The code interpreter's context id is its Jupyter kernel's
   * id, which names the kernel's connection file on the kernel's command line.
   */
  private async interrupt(contextId: string): Promise<void> {
    // Anchored at the start of the command line: only a kernel (Python's or the JavaScript
    // one) itself, not a process whose arguments merely mention it.
    const id = contextId.replace(/[^A-Za-z0-9-]/g, "");
    const pattern = `^[^ ]*(python|node|deno)[^ ]* .*kernel-${id}\\.json`;
    await this.exec(`pkill -INT -f -- ${shq(pattern)}`, {
      cwd: "/",
      timeoutMs: 30_000,
      user: "root",
    }).catch(() => undefined);
  }

  /** One Python kernel context per working directory, created on first use. */
  private context(language: "python", cwd: string): Promise<Context> {
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

  async createCodeContext(o: CodeContextOptions = {}): Promise<CodeContext> {
    const language = o.language ?? this.defaults.language;
    if (language !== "python" && language !== "typescript")
      throw new SandboxError(
        `unknown language ${JSON.stringify(language)}: use "python" or "typescript"`,
        "INVALID_ARGUMENT",
      );
    const cwd = virtualPath(o.cwd ?? this.defaults.workingDirectory);
    this.alive();
    // The interpreter would start anywhere; the contract wants a missing directory refused.
    const dir = await this.filesystem.stat(cwd);
    if (dir.type !== "dir")
      throw new SandboxError(`cwd ${cwd} is not a directory`, "INVALID_ARGUMENT");
    try {
      const ctx = await this.sandbox.createCodeContext({ language, cwd });
      return { id: ctx.id, language, cwd: ctx.cwd || cwd };
    } catch (err) {
      throw fromE2B(err, "creating a code context");
    }
  }

  /** The interpreter's contexts in Sandpit's two languages (its default ones included). */
  async listCodeContexts(): Promise<CodeContext[]> {
    this.alive();
    let all: Context[];
    try {
      all = await this.sandbox.listCodeContexts();
    } catch (err) {
      throw fromE2B(err, "listing code contexts");
    }
    return all.flatMap((c) => {
      const language = contextLanguage(c.language);
      return language ? [{ id: c.id, language, cwd: c.cwd }] : [];
    });
  }

  async removeCodeContext(context: CodeContext | string): Promise<void> {
    const id = contextId(context);
    this.alive();
    try {
      await this.sandbox.removeCodeContext(id);
    } catch (err) {
      const mapped = fromE2B(err, `removing code context ${id}`);
      if (mapped.code !== "NOT_FOUND") throw mapped;
    }
    for (const [key, ctx] of this.contexts)
      if ((await ctx.catch(() => null))?.id === id) this.contexts.delete(key);
  }

  /** The context a cell asked for; its language must be the cell's. */
  private async findContext(context: CodeContext | string, language: SandboxLanguage) {
    const id = contextId(context);
    const found =
      typeof context === "string"
        ? (await this.listCodeContexts()).find((c) => c.id === id)
        : context;
    if (!found) throw new SandboxError(`no code context ${id}`, "NOT_FOUND");
    if (found.language !== language)
      throw new SandboxError(
        `code context ${id} runs ${found.language}, not ${language}`,
        "INVALID_ARGUMENT",
      );
    return { id: found.id, language: found.language, cwd: found.cwd };
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

  /**
   * https on port 443 (E2B's edge), plain http where the host template points elsewhere (a
   * local deployment); a sandbox with restricted public traffic needs its traffic token.
   */
  async getUrl(port: number): Promise<SandboxUrl> {
    const host = await this.getHost(port);
    const token = this.sandbox.trafficAccessToken;
    return {
      url: host.endsWith(":443") ? `https://${host.slice(0, -4)}` : `http://${host}`,
      headers: token ? { "e2b-traffic-access-token": token } : {},
    };
  }

  async setTimeout(timeoutMs: number): Promise<void> {
    const ms = validateTimeout(timeoutMs);
    this.alive();
    try {
      await this.sandbox.setTimeout(ms);
    } catch (err) {
      throw fromE2B(err, `setting the timeout of sandbox ${this.sandboxId}`);
    }
  }

  async getInfo(): Promise<SandboxInfo> {
    this.alive();
    try {
      return e2bInfo(await this.sandbox.getInfo());
    } catch (err) {
      throw fromE2B(err, `finding sandbox ${this.sandboxId}`);
    }
  }
}

/** Pages of 100 sandboxes list() reads at most. */
const LIST_PAGES = 20;

/** E2B's sandbox info as the contract's; Sandpit's own metadata is not among the labels. */
function e2bInfo(s: {
  sandboxId: string;
  templateId: string;
  metadata: Record<string, string>;
  startedAt: Date;
  endAt: Date;
  state: string;
  cpuCount?: number;
  memoryMB?: number;
}): SandboxInfo {
  const m = s.metadata ?? {};
  const language = m[META.language];
  return {
    sandboxId: s.sandboxId,
    provider: "e2b",
    state: s.state === "paused" ? "paused" : "running",
    labels: userLabels(m),
    ...(language === "python" || language === "typescript" ? { language } : {}),
    ...(m[META.thread] ? { threadId: m[META.thread] } : {}),
    ...(m[META.user] ? { userId: m[META.user] } : {}),
    template: s.templateId,
    createdAt: new Date(s.startedAt),
    expiresAt: new Date(s.endAt),
    resources: {
      ...(s.cpuCount ? { cpu: s.cpuCount } : {}),
      ...(s.memoryMB ? { memoryMiB: s.memoryMB } : {}),
    },
  };
}

function contextId(context: CodeContext | string): string {
  const id = typeof context === "string" ? context : context?.id;
  if (typeof id !== "string" || !ID_PATTERN.test(id))
    throw new SandboxError(
      `context must be a code context or its id (${ID_RULE})`,
      "INVALID_ARGUMENT",
    );
  return id;
}

function contextLanguage(language: string): SandboxLanguage | undefined {
  if (language === "python") return "python";
  if (language === "typescript" || language === "ts") return "typescript";
  return undefined;
}

/** How long a command's end may trail a refusal of its input (the end event is on its way). */
const EXIT_GRACE_MS = 2_000;

/** Whether the command has ended, or does within EXIT_GRACE_MS. */
function exited(h: CommandHandle): Promise<boolean> {
  const ended = h.wait().then(
    () => true,
    (err: unknown) => err instanceof CommandExitError,
  );
  let timer: NodeJS.Timeout | undefined;
  const later = new Promise<boolean>(
    (resolve) => (timer = setTimeout(resolve, EXIT_GRACE_MS, false)),
  );
  return Promise.race([ended, later]).finally(() => clearTimeout(timer));
}
