/**
 * The Daytona provider, on the official `@daytonaio/sdk`.
 *
 * How the contract maps onto Daytona:
 *  - one Sandpit thread is one Daytona sandbox, found again by its labels (`sandpit-user`,
 *    `sandpit-thread`); pause is `stop` (or `pause` on VM runners), resume is `get` + `start`,
 *    and the sandbox keeps its ID and disk throughout;
 *  - commands run through the session API, one short-lived session per command, which keeps
 *    stdout and stderr apart and streams them (`getSessionCommandLogs` over WebSocket); the
 *    command is wrapped in a small POSIX shell script that sets cwd and env, feeds stdin, and
 *    bounds it with `timeout`, so a deadline kills its whole process group in the sandbox;
 *  - background commands are sessions of their own (see processes.ts);
 *  - code runs with Sandpit's own runners (the same files sandboxd uses), uploaded into
 *    /mnt/user-data/.sandpit at create: this gives name/message/traceback and TypeScript in any
 *    sandbox, where Daytona's `codeRun` has neither structured errors nor per-call languages;
 *  - packages go to /mnt/user-data/.sandpit (pip --target, npm --prefix), on PYTHONPATH and
 *    NODE_PATH of every process, so they survive stop/start like the rest of the data;
 *  - Daytona timeouts are seconds: every millisecond value is converted at the boundary with
 *    Math.ceil(ms / 1000); its lifetimes are minutes (ttlMinutes, autoStopInterval), rounded up;
 *  - labels are Daytona labels (list filters on them), `template` is the snapshot, network deny
 *    and allow are networkBlockAll / networkAllowList; get is `daytona.get` (nothing started).
 */
import { noCodeContexts, notSupported } from "../../unsupported.ts";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Daytona, DaytonaNotFoundError, type Sandbox } from "@daytonaio/sdk";
import { DEFAULT_TIMEOUT_MS, ID_PATTERN, parseOutput } from "@sandpit/sandboxd/wire";
import { RUNNERS, RUNNERS_DIR } from "@sandpit/sandboxd/runners";
import type { Logger } from "../../logger.ts";
import { z } from "zod";
import { DaytonaProviderOptions } from "./options.ts";
import { SandboxError } from "../../errors.ts";
import { parseOptions } from "../../parse-options.ts";
import { checkPort } from "../../validate.ts";
import { validateCreate, validateListLabels, validateTimeout } from "../../create-options.ts";
import { refuseUnsupported, userLabels } from "../../platform-options.ts";
import type {
  CodeExecutionOptions,
  CodeExecutionResult,
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
  SandboxState,
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
  VIRTUAL_LAYOUT,
  VIRTUAL_ROOT,
  VIRTUAL_WORKSPACE,
  virtualPath,
} from "../cloud-common.ts";
import { fromDaytona } from "./errors.ts";
import { DaytonaFilesystem } from "./filesystem.ts";
import { DaytonaCommands, type DaytonaProcessHost } from "./processes.ts";
import { DaytonaPty } from "./pty.ts";

/** Re-exported so the provider's entry point carries its options schema. */
export { DaytonaProviderOptions };

type Options = z.output<typeof DaytonaProviderOptions>;

/** Sandpit's state inside the data directory: code runners, code cells, packages. */
const STATE = `${VIRTUAL_ROOT}/.sandpit`;
/** Where sandboxd's code-cell runners are uploaded to. */
const RUNNER_DIR = `${STATE}/runners`;
const RUN = `${STATE}/run`;
const PY_PACKAGES = `${STATE}/python`;
const NODE_MODULES = `${STATE}/node_modules`;
/** Extra time the client waits past a command's own deadline before giving up on it. */
const DEADLINE_GRACE_MS = 5_000;
/** Exit statuses of coreutils `timeout` when it stopped the command (TERM, then KILL). */
const TIMEOUT_EXITS = new Set([124, 137]);

const seconds = (ms: number) => Math.ceil(ms / 1000);
const minutes = (ms: number) => Math.ceil(ms / 60_000);
const CIDR = /^[0-9a-fA-F:.]+\/\d{1,3}$/;

interface Defaults {
  language: SandboxLanguage;
  workingDirectory: string;
  timeoutMs: number | undefined;
}

export class DaytonaProvider implements SandboxProvider {
  readonly options: Options;
  readonly client: Daytona;
  private readonly logger: Logger | undefined;
  private readonly pending = new Map<string, Promise<DaytonaInstance>>();

  constructor(options: DaytonaProviderOptions, logger?: Logger) {
    this.options = parseOptions(DaytonaProviderOptions, options, "daytona provider options");
    this.logger = logger;
    // All three of apiKey/apiUrl/target are passed, so the SDK never reads DAYTONA_* from
    // the environment or a .env file in the working directory.
    try {
      this.client = new Daytona({
        apiKey: this.options.apiKey,
        apiUrl: this.options.apiUrl,
        target: this.options.target,
        useDeprecatedPolling: this.options.useDeprecatedPolling,
      });
    } catch (err) {
      throw fromDaytona(err, "configuring the client");
    }
  }

  get lifecycleSeconds(): number {
    return seconds(this.options.timeoutMs);
  }

  async create(options: SandboxCreateOptions): Promise<SandboxInstance> {
    const o = validateCreate(options);
    const sized =
      "Daytona sizes only sandboxes built from an image; this provider creates from snapshots";
    refuseUnsupported(
      "daytona",
      o,
      {
        ttl: true,
        idleTimeout: true,
        template: true,
        labels: true,
        networkDeny: true,
        networkInternet: true,
        networkAllow: true,
      },
      { cpu: sized, memory: sized, disk: sized, mounts: "Daytona volumes are not wired to mounts" },
    );
    if (typeof o.network === "object" && !o.network.allow.every((a) => CIDR.test(a)))
      throw notSupported(
        "daytona",
        "host names in network.allow (Daytona's allow list takes CIDRs)",
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
  ): Promise<DaytonaInstance> {
    const found = await this.findThread(userId, threadId);
    if (found) {
      this.logger?.debug(
        { sandboxId: found.id, userId, threadId },
        "reusing the thread's Daytona sandbox",
      );
      const inst = await this.started(found);
      await inst.setup(o.language, o.packages, workingDirectory);
      return inst;
    }
    const envs = { ...o.envs };
    // Packages live in the data directory; every process in the sandbox sees them.
    envs.PYTHONPATH = envs.PYTHONPATH ? `${PY_PACKAGES}:${envs.PYTHONPATH}` : PY_PACKAGES;
    envs.NODE_PATH = envs.NODE_PATH ? `${NODE_MODULES}:${envs.NODE_PATH}` : NODE_MODULES;
    let sbx: Sandbox;
    try {
      sbx = await this.client.create(
        {
          language: o.language,
          envVars: envs,
          labels: {
            ...o.labels,
            [META.user]: userId,
            [META.thread]: threadId,
            [META.language]: o.language,
            [META.workdir]: workingDirectory,
            ...(o.timeoutMs ? { [META.timeoutMs]: String(o.timeoutMs) } : {}),
          },
          ...((o.template ?? this.options.snapshot)
            ? { snapshot: o.template ?? this.options.snapshot }
            : {}),
          ...(o.lifetime?.idleTimeoutMs
            ? { autoStopInterval: minutes(o.lifetime.idleTimeoutMs) }
            : this.options.autoStopIntervalMinutes !== undefined
              ? { autoStopInterval: this.options.autoStopIntervalMinutes }
              : {}),
          ...(o.lifetime?.ttlMs ? { ttlMinutes: minutes(o.lifetime.ttlMs) } : {}),
          ...(o.network === "deny" ? { networkBlockAll: true } : {}),
          ...(typeof o.network === "object" ? { networkAllowList: o.network.allow.join(",") } : {}),
        },
        { timeout: this.lifecycleSeconds },
      );
    } catch (err) {
      throw fromDaytona(err, "creating a sandbox");
    }
    const inst = new DaytonaInstance(this, sbx, {
      language: o.language,
      workingDirectory,
      timeoutMs: o.timeoutMs,
    });
    try {
      await inst.layout();
      await inst.setup(o.language, o.packages, workingDirectory);
    } catch (err) {
      await sbx.delete(this.lifecycleSeconds).catch(() => undefined);
      throw err;
    }
    this.logger?.debug({ sandboxId: sbx.id, userId, threadId }, "created a Daytona sandbox");
    return inst;
  }

  private async findThread(userId: string, threadId: string): Promise<Sandbox | undefined> {
    if (!ID_PATTERN.test(userId) || !ID_PATTERN.test(threadId)) return undefined;
    try {
      let seen = 0;
      for await (const s of this.client.list({
        labels: { [META.user]: userId, [META.thread]: threadId },
        limit: 20,
      })) {
        if (++seen > 100) break;
        if (s.labels?.[META.user] !== userId || s.labels?.[META.thread] !== threadId) continue;
        if (["destroyed", "destroying", "error", "build_failed"].includes(String(s.state)))
          continue;
        return s;
      }
      return undefined;
    } catch (err) {
      throw fromDaytona(err, "looking up the thread's sandbox");
    }
  }

  /** Sandboxes carrying the labels, in any state but deleted; nothing is started. */
  async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const wanted = validateListLabels(options?.labels);
    const out: SandboxInfo[] = [];
    try {
      for await (const s of this.client.list({ labels: wanted, limit: 100 })) {
        if (out.length >= LIST_MAX) break;
        if (GONE.has(String(s.state))) continue;
        out.push(daytonaInfo(s));
      }
    } catch (err) {
      throw fromDaytona(err, "listing sandboxes");
    }
    return out;
  }

  async get(sandboxId: string): Promise<SandboxInfo> {
    if (typeof sandboxId !== "string" || !sandboxId)
      throw new SandboxError("sandboxId is required", "NOT_FOUND");
    let sbx: Sandbox;
    try {
      sbx = await this.client.get(sandboxId);
    } catch (err) {
      throw fromDaytona(err, `finding sandbox ${sandboxId}`);
    }
    if (GONE.has(String(sbx.state)))
      throw new SandboxError(`Daytona sandbox ${sandboxId} was deleted`, "NOT_FOUND");
    return daytonaInfo(sbx);
  }

  /** Nothing is held per sandbox between calls (each call is its own request). */
  async release(_sandboxId: string): Promise<void> {}

  async close(): Promise<void> {}

  async resume(sandboxId: string): Promise<SandboxInstance> {
    if (typeof sandboxId !== "string" || !sandboxId)
      throw new SandboxError("sandboxId is required", "NOT_FOUND");
    let sbx: Sandbox;
    try {
      sbx = await this.client.get(sandboxId);
    } catch (err) {
      throw fromDaytona(err, `resuming sandbox ${sandboxId}`);
    }
    if (["destroyed", "destroying"].includes(String(sbx.state)))
      throw new SandboxError(`Daytona sandbox ${sandboxId} was deleted`, "NOT_FOUND");
    return this.started(sbx);
  }

  /** Starts a stopped/paused sandbox and restores its Sandpit defaults from its labels. */
  private async started(sbx: Sandbox): Promise<DaytonaInstance> {
    try {
      if (sbx.state !== "started") await sbx.start(this.lifecycleSeconds);
    } catch (err) {
      throw fromDaytona(err, `starting sandbox ${sbx.id}`);
    }
    const labels = sbx.labels ?? {};
    const timeoutMs = Number(labels[META.timeoutMs]);
    return new DaytonaInstance(this, sbx, {
      language: labels[META.language] === "typescript" ? "typescript" : "python",
      workingDirectory: labels[META.workdir] || VIRTUAL_WORKSPACE,
      timeoutMs: Number.isFinite(timeoutMs) && timeoutMs > 0 ? timeoutMs : undefined,
    });
  }
}

interface ExecOptions {
  cwd: string;
  envs?: Record<string, string> | undefined;
  timeoutMs: number;
  stdin?: string | undefined;
  /** A file in the sandbox that holds the stdin instead (too long for the command line). */
  stdinFile?: string | undefined;
  onStdout?: ((d: string) => void) | undefined;
  onStderr?: ((d: string) => void) | undefined;
  /** Aborting deletes the command's session, which kills the command. */
  signal?: AbortSignal | undefined;
}

/**
 * Daytona's code interpreter (`sandbox.codeInterpreter` in the pinned SDK) is Python-only and
 * answers a cell with stdout, stderr and an error alone: no value of the last expression, no
 * display() results, and no way to interrupt a cell but its timeout. The contract's contexts need
 * all of these, so they stay refused rather than half-kept.
 */
const CONTEXTS_LACK =
  "Daytona's interpreter is Python-only and returns no cell values, display results or interrupt";
const NO_CONTEXTS = noCodeContexts("Daytona", CONTEXTS_LACK);

export class DaytonaInstance implements SandboxInstance, DaytonaProcessHost {
  readonly pty = new DaytonaPty(this);
  readonly createCodeContext = NO_CONTEXTS.createCodeContext;
  readonly listCodeContexts = NO_CONTEXTS.listCodeContexts;
  readonly removeCodeContext = NO_CONTEXTS.removeCodeContext;
  readonly sandboxId: string;
  readonly commands: SandboxCommands;
  readonly filesystem: SandboxFilesystem;
  readonly sandbox: Sandbox;
  private readonly provider: DaytonaProvider;
  private readonly defaults: Defaults;
  private killed = false;

  constructor(provider: DaytonaProvider, sandbox: Sandbox, defaults: Defaults) {
    this.provider = provider;
    this.sandbox = sandbox;
    this.sandboxId = sandbox.id;
    this.defaults = defaults;
    this.commands = new DaytonaCommands(this, (command, options) => this.run(command, options));
    this.filesystem = new DaytonaFilesystem(this);
  }

  get workingDirectory(): string {
    return this.defaults.workingDirectory;
  }

  get stateDir(): string {
    return STATE;
  }

  alive(): void {
    if (this.killed)
      throw new SandboxError(`Daytona sandbox ${this.sandboxId} was deleted`, "NOT_FOUND");
  }

  /** /mnt/user-data and Sandpit's state; as root through sudo when the image user cannot. */
  async layout(): Promise<void> {
    const dirs = [...VIRTUAL_LAYOUT, RUNNER_DIR, RUN].map(shq).join(" ");
    const cmd = `mkdir -p ${dirs} 2>/dev/null || { sudo -n mkdir -p ${dirs} && sudo -n chown -R "$(id -u):$(id -g)" ${shq(VIRTUAL_ROOT)}; }`;
    const r = await this.exec(cmd, { cwd: "/", timeoutMs: 60_000 });
    if (r.exitCode !== 0)
      throw new SandboxError(
        `Daytona: could not create ${VIRTUAL_ROOT}: ${(r.stderr || r.stdout).trim()}`,
        "EXECUTION_FAILED",
      );
    const files = await Promise.all(
      Object.values(RUNNERS).map(async (f) => ({
        source: await readFile(join(RUNNERS_DIR, f)),
        destination: `${RUNNER_DIR}/${f}`,
      })),
    );
    try {
      await this.sandbox.fs.uploadFiles(files, seconds(60_000));
    } catch (err) {
      throw fromDaytona(err, "uploading Sandpit's code runners");
    }
  }

  async setup(
    language: SandboxLanguage,
    packages: string[] | undefined,
    workingDirectory: string,
  ): Promise<void> {
    if (workingDirectory !== VIRTUAL_WORKSPACE) await this.filesystem.mkdir(workingDirectory);
    if (!packages?.length) return;
    const cmd =
      language === "python"
        ? installCommand("python", packages, undefined, PY_PACKAGES)
        : installCommand("typescript", packages, STATE);
    const r = await this.exec(cmd, { cwd: VIRTUAL_WORKSPACE, timeoutMs: INSTALL_TIMEOUT_MS });
    if (r.exitCode !== 0) throw installFailed(packages, r);
  }

  private async run(
    command: string,
    o: SandboxCommandOptions = {},
  ): Promise<SandboxExecutionResult> {
    if (typeof command !== "string" || command.length === 0)
      throw new SandboxError("command must be a non-empty string", "INVALID_ARGUMENT");
    checkEnvs(o.envs);
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const started = performance.now();
    const r = await this.exec(command, {
      cwd: virtualPath(o.cwd ?? this.defaults.workingDirectory),
      envs: o.envs,
      timeoutMs,
      stdin: o.stdin,
      onStdout: o.onStdout,
      onStderr: o.onStderr,
      signal: o.signal,
    });
    if (r.timedOut) {
      throw new SandboxError(
        `command timed out after ${elapsed(started)} ms and was killed with its process group: ${command.slice(0, 200)}`,
        "TIMEOUT",
      );
    }
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  }

  /**
   * Runs `command` in a fresh session and streams its logs until it ends. The session is
   * deleted afterwards, which also stops anything still attached to it.
   */
  async exec(
    command: string,
    o: ExecOptions,
  ): Promise<SandboxExecutionResult & { timedOut: boolean }> {
    this.alive();
    if (o.signal?.aborted) throw abortReason(o.signal);
    const proc = this.sandbox.process;
    const sessionId = `sandpit-${randomUUID()}`;
    const started = performance.now();
    // An abort ends the wait at once, whether or not the log stream notices its session go.
    let stopWaiting: (reason: unknown) => void = () => undefined;
    const aborted = new Promise<never>((_resolve, reject) => (stopWaiting = reject));
    aborted.catch(() => undefined); // rejected only while a wait races it, or not at all
    const onAbort = () => {
      stopWaiting(abortReason(o.signal!));
      void proc.deleteSession(sessionId).catch(() => undefined);
    };
    try {
      await proc.createSession(sessionId);
    } catch (err) {
      throw fromDaytona(err, "opening a command session");
    }
    if (o.stdin !== undefined && Buffer.byteLength(o.stdin) > INLINE_STDIN_BYTES) {
      // One argument of a command line holds at most 128 KiB (Linux's MAX_ARG_STRLEN): longer
      // input goes in a file the command's shell opens, then unlinks before the command runs.
      const stdinFile = `${RUN}/stdin-${sessionId}`;
      try {
        await this.sandbox.fs.uploadFile(Buffer.from(o.stdin), stdinFile, seconds(o.timeoutMs));
      } catch (err) {
        await proc.deleteSession(sessionId).catch(() => undefined);
        throw fromDaytona(err, "sending a command's stdin");
      }
      o = { ...o, stdin: undefined, stdinFile };
    }
    try {
      let cmdId: string;
      try {
        ({ cmdId } = await proc.executeSessionCommand(sessionId, {
          command: wrap(command, o),
          runAsync: true,
        }));
      } catch (err) {
        throw fromDaytona(err, "starting a command");
      }
      // An abort while the session and command were being set up fired before any listener:
      // it is honoured here (the finally below deletes the session, stopping the command).
      if (o.signal?.aborted) throw abortReason(o.signal);
      o.signal?.addEventListener("abort", onAbort, { once: true });
      let stdout = "";
      let stderr = "";
      const logs = proc.getSessionCommandLogs(
        sessionId,
        cmdId,
        (d: string) => {
          stdout += d;
          o.onStdout?.(d);
        },
        (d: string) => {
          stderr += d;
          o.onStderr?.(d);
        },
      );
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<"deadline">(
        (resolve) =>
          (timer = setTimeout(() => resolve("deadline"), o.timeoutMs + DEADLINE_GRACE_MS)),
      );
      let outcome: unknown;
      try {
        outcome = await Promise.race([logs, deadline, aborted]);
        if (o.signal?.aborted) throw abortReason(o.signal);
      } catch (err) {
        if (o.signal?.aborted) throw abortReason(o.signal);
        // The WebSocket layer rejects with an ErrorEvent-like object holding the real error.
        const inner =
          !(err instanceof Error) && err && typeof err === "object" && "error" in err
            ? (err as { error: unknown }).error
            : err;
        const mapped = fromDaytona(inner, "streaming command output");
        // Whatever broke the stream, the command's outcome is unknown: the connection failed.
        throw mapped.code === "INTERNAL"
          ? new SandboxError(mapped.message, "CONNECTION_FAILED", inner)
          : mapped;
      } finally {
        clearTimeout(timer);
        o.signal?.removeEventListener("abort", onAbort);
      }
      // The in-sandbox `timeout` should have fired long before; deleting the session stops it.
      if (outcome === "deadline") return { exitCode: -1, stdout, stderr, timedOut: true };
      const exitCode = await this.exitCode(sessionId, cmdId);
      const timedOut = TIMEOUT_EXITS.has(exitCode) && elapsed(started) >= o.timeoutMs;
      return { exitCode, stdout, stderr, timedOut };
    } finally {
      await proc.deleteSession(sessionId).catch(() => undefined);
    }
  }

  /** The exit code, which the daemon records as the log stream ends (bounded wait). */
  private async exitCode(sessionId: string, cmdId: string): Promise<number> {
    for (let i = 0; i < 50; i++) {
      let code: number | undefined;
      try {
        code = (await this.sandbox.process.getSessionCommand(sessionId, cmdId)).exitCode;
      } catch (err) {
        throw fromDaytona(err, "reading a command's exit code");
      }
      if (typeof code === "number") return code;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new SandboxError(
      "Daytona: the command's output stream ended but it reported no exit code (dropped stream?)",
      "CONNECTION_FAILED",
    );
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
    // A cell meant for a persistent context must not silently run in a fresh interpreter.
    if (o.context !== undefined) throw notSupported("Daytona", `code contexts (${CONTEXTS_LACK})`);
    this.alive();
    const cwd = virtualPath(o.cwd ?? this.defaults.workingDirectory);
    const timeoutMs = o.timeoutMs ?? this.defaults.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const id = randomUUID();
    const codeFile = `${RUN}/${id}.${language === "python" ? "py" : "mts"}`;
    const errorFile = `${RUN}/${id}.error.json`;
    try {
      await this.sandbox.fs.uploadFile(Buffer.from(code, "utf8"), codeFile, seconds(60_000));
    } catch (err) {
      throw fromDaytona(err, "uploading the code");
    }
    const runner =
      language === "python"
        ? `python3 -u ${shq(`${RUNNER_DIR}/${RUNNERS.python}`)} ${shq(codeFile)} ${shq(errorFile)}`
        : `node --experimental-transform-types --disable-warning=ExperimentalWarning --import ${shq(`file://${RUNNER_DIR}/${RUNNERS.typescript}`)} ${shq(codeFile)}`;
    const envs =
      language === "typescript"
        ? { ...o.envs, SANDPIT_ERROR_FILE: errorFile, SANDPIT_CODE_FILE: codeFile }
        : o.envs;
    const started = performance.now();
    const r = await this.exec(`${runner}; rc=$?; rm -f ${shq(codeFile)}; exit $rc`, {
      cwd,
      envs,
      timeoutMs,
      onStdout: o.onStdout,
      onStderr: o.onStderr,
      signal: o.signal,
    });
    const durationMs = elapsed(started);
    if (r.timedOut) {
      await this.sandbox.fs.deleteFile(codeFile).catch(() => undefined);
      throw new SandboxError(
        `code execution exceeded its timeout of ${timeoutMs} ms and was killed`,
        "TIMEOUT",
      );
    }
    const reported = r.exitCode === 0 ? null : await this.readError(errorFile);
    const result: CodeExecutionResult = {
      success: r.exitCode === 0 && !reported,
      stdout: r.stdout,
      stderr: r.stderr,
      durationMs,
      results: [],
    };
    const output = parseOutput(r.stdout);
    if (output !== undefined) result.output = output;
    if (!result.success) {
      result.error = reported ?? {
        name: "ExitError",
        message: `process exited with code ${r.exitCode}`,
        ...(r.stderr ? { traceback: r.stderr.slice(-8000) } : {}),
      };
    }
    return result;
  }

  /** The runner's structured error, if it wrote one (then the file is removed). */
  private async readError(
    path: string,
  ): Promise<{ name: string; message: string; traceback?: string } | null> {
    let raw: Buffer;
    try {
      raw = await this.sandbox.fs.downloadFile(path, seconds(60_000));
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return null;
      throw fromDaytona(err, "reading the code's error report");
    }
    await this.sandbox.fs.deleteFile(path).catch(() => undefined);
    try {
      const e = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
      return {
        name: String(e.name),
        message: String(e.message),
        ...(typeof e.traceback === "string" ? { traceback: e.traceback } : {}),
      };
    } catch {
      return null;
    }
  }

  async kill(): Promise<void> {
    if (this.killed) return;
    try {
      await this.sandbox.delete(this.provider.lifecycleSeconds);
    } catch (err) {
      if (!(err instanceof DaytonaNotFoundError))
        throw fromDaytona(err, `deleting sandbox ${this.sandboxId}`);
    }
    this.killed = true;
  }

  async pause(): Promise<void> {
    this.alive();
    try {
      if (this.provider.options.pauseMode === "pause")
        await this.sandbox.pause(this.provider.lifecycleSeconds);
      else await this.sandbox.stop(this.provider.lifecycleSeconds);
    } catch (err) {
      throw fromDaytona(err, `pausing sandbox ${this.sandboxId}`);
    }
  }

  /**
   * host:port of Daytona's preview URL for `port`. Private sandboxes also want the
   * `x-daytona-preview-token` header, which a host string cannot carry (see the README).
   */
  async getHost(port: number): Promise<string> {
    checkPort(port);
    this.alive();
    let url: URL;
    try {
      url = new URL((await this.sandbox.getPreviewLink(port)).url);
    } catch (err) {
      throw fromDaytona(err, `getting the preview URL of port ${port}`);
    }
    return url.port ? url.host : `${url.hostname}:${url.protocol === "https:" ? 443 : 80}`;
  }

  /** Daytona's preview link; a private sandbox's needs its token in x-daytona-preview-token. */
  async getUrl(port: number): Promise<SandboxUrl> {
    checkPort(port);
    this.alive();
    try {
      const link = await this.sandbox.getPreviewLink(port);
      return {
        url: link.url,
        headers: link.token ? { "x-daytona-preview-token": link.token } : {},
      };
    } catch (err) {
      throw fromDaytona(err, `getting the preview URL of port ${port}`);
    }
  }

  /** Daytona's TTL counts from now when set on an existing sandbox: minutes, rounded up. */
  async setTimeout(timeoutMs: number): Promise<void> {
    const ms = validateTimeout(timeoutMs);
    this.alive();
    try {
      await this.sandbox.setTtl(minutes(ms));
    } catch (err) {
      throw fromDaytona(err, `setting the timeout of sandbox ${this.sandboxId}`);
    }
  }

  async getInfo(): Promise<SandboxInfo> {
    this.alive();
    return this.provider.get(this.sandboxId);
  }
}

/**
 * The script a session runs: a subshell (so nothing leaks into the session) that enters the
 * working directory, exports per-command variables, and runs the command under `timeout`
 * (which signals the whole process group: TERM, then KILL 2 s later) with the given stdin
 * (or none: a session's own stdin would block a reader forever).
 */
function wrap(command: string, o: ExecOptions): string {
  const exports = Object.entries(o.envs ?? {})
    .map(([k, v]) => `export ${k}=${shq(v)}; `)
    .join("");
  const limit = (o.timeoutMs / 1000).toFixed(3);
  const run = `timeout -k 2 ${limit} sh -c ${shq(command)}`;
  const input = o.stdinFile
    ? `{ rm -f ${shq(o.stdinFile)}; ${run}; } < ${shq(o.stdinFile)}`
    : o.stdin === undefined
      ? `${run} < /dev/null`
      : `printf '%s' ${shq(Buffer.from(o.stdin).toString("base64"))} | base64 -d | ${run}`;
  return `(cd ${shq(o.cwd)} || exit 1; ${exports}${input})`;
}

/** Stdin up to this long is written into the command line (base64: a third longer). */
const INLINE_STDIN_BYTES = 64 * 1024;

const TOOLBOX_LABEL = "code-toolbox-language";

/** Daytona states of a sandbox that no longer exists. */
const GONE = new Set(["destroyed", "destroying"]);
/** Sandboxes list() reads at most. */
const LIST_MAX = 2_000;

const DAYTONA_STATES: Record<string, SandboxState> = {
  started: "running",
  stopped: "paused",
  paused: "paused",
  archived: "paused",
  stopping: "stopping",
  error: "failed",
  build_failed: "failed",
};

function daytonaInfo(s: Sandbox): SandboxInfo {
  const l = s.labels ?? {};
  const language = l[META.language];
  return {
    sandboxId: s.id,
    provider: "daytona",
    state: DAYTONA_STATES[String(s.state)] ?? "starting",
    // The SDK labels each sandbox with its toolbox language itself.
    labels: userLabels(Object.fromEntries(Object.entries(l).filter(([k]) => k !== TOOLBOX_LABEL))),
    ...(language === "python" || language === "typescript" ? { language } : {}),
    ...(l[META.thread] ? { threadId: l[META.thread] } : {}),
    ...(l[META.user] ? { userId: l[META.user] } : {}),
    ...(s.snapshot ? { template: s.snapshot } : {}),
    ...(s.createdAt ? { createdAt: new Date(s.createdAt) } : {}),
    resources: { cpu: s.cpu, memoryMiB: s.memory * 1024, diskMiB: s.disk * 1024 },
  };
}
