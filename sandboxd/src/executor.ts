/**
 * Turns API requests (a command, a code cell, a package install) into sandboxed processes:
 * paths through the jail, a scrubbed environment with Sandpit's interpreters first on PATH, and
 * a CodeExecutionResult built from the runner's structured error. Isolation is whatever
 * sandboxd itself runs in (a container, a pod, or bubblewrap started by the local provider).
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  DEFAULT_TIMEOUT_MS,
  parseOutput,
  SandboxdError,
  type CodeExecutionResult,
  type RunCommandResult,
} from "./wire.ts";
import type { ExecuteCodeRequest, InstallPackagesRequest, RunCommandRequest } from "./protocol.ts";
import type { Interpreters } from "./environment.ts";
import { RUNNERS, RUNNERS_DIR } from "./runners.ts";
import type { JailPath, PathJail } from "./jail.ts";
import { runProcess, superviseProcess } from "./process.ts";
import { STALE_EXIT, SpareRunner } from "./spare-runner.ts";

export interface ExecutorOptions {
  jail: PathJail;
  /** Scrubbed base environment every process starts from. */
  baseEnv: Record<string, string>;
  outputCapBytes: number;
  interpreters: Promise<Interpreters>;
}

/** Sandpit's own state inside the sandbox root: packages, code cells, a home directory. */
export const STATE_DIR = ".sandpit";

export class Executor {
  private readonly opts: ExecutorOptions;
  /** Sandbox-wide environment, set at start and by warm-pool adoption (/v1/init). */
  private sandboxEnv: Record<string, string> = {};
  private readonly rootRef: RegExp;
  /** A Python interpreter started ahead of the next cell (spare-runner.ts). */
  private readonly spare: SpareRunner;

  constructor(opts: ExecutorOptions) {
    this.opts = opts;
    this.spare = new SpareRunner(async () => {
      const interp = await opts.interpreters;
      return {
        file: interp.python,
        args: ["-u", join(RUNNERS_DIR, RUNNERS.python), "--spare"],
        cwd: opts.jail.hostPath(await this.existingDir(undefined)),
        env: this.processEnv(),
      };
    });
    this.rootRef = new RegExp(
      `${opts.jail.virtualRoot.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(?![\\w.-])`,
      "g",
    );
  }

  setSandboxEnv(env: Record<string, string>): void {
    this.sandboxEnv = { ...this.sandboxEnv, ...env };
    this.spare.renew(this.processEnv());
  }

  /** Starts the spare interpreter for the first cell (sandboxd has answered its first request). */
  prepare(): void {
    this.spare.fill();
  }

  /** Lets the spare interpreter go (sandboxd stops). */
  close(): void {
    this.spare.close();
  }

  async runCommand(
    req: RunCommandRequest,
    stream?: {
      onChunk?: (s: "stdout" | "stderr", d: string, o: number) => void;
      signal?: AbortSignal;
    },
  ): Promise<RunCommandResult> {
    const cwd = await this.existingDir(req.cwd);
    return this.spawn(["/bin/sh", "-c", this.localise(req.command)], {
      cwd,
      env: req.env,
      stdin: req.stdin,
      timeoutMs: req.timeoutMs,
      onChunk: stream?.onChunk,
      signal: stream?.signal,
    });
  }

  async executeCode(req: ExecuteCodeRequest, signal?: AbortSignal): Promise<CodeExecutionResult> {
    const { jail } = this.opts;
    const interp = await this.opts.interpreters;
    const cwd = await this.existingDir(req.cwd);
    const id = randomUUID();
    const ext = req.language === "python" ? "py" : "mts";
    const codePath = jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/run/${id}.${ext}`);
    const errorPath = jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/run/${id}.error.json`);
    const source = this.localise(req.code);
    const code = this.inSandbox(codePath);
    const error = this.inSandbox(errorPath);
    let written = false;
    try {
      if (req.language === "python") {
        // The spare interpreter, when it is what a fresh start would be (spare-runner.ts); the
        // code goes with the hand-over, not through a file.
        const env = this.processEnv(req.env);
        const spare = this.spare.take(env);
        if (spare) {
          const cell = { source, error, cwd: this.inSandbox(cwd), env };
          const result = await this.spawn(spare, {
            cwd,
            stdin: `${JSON.stringify(cell)}\n`,
            timeoutMs: req.timeoutMs,
            signal,
          });
          if (!(result.exitCode === STALE_EXIT && (await this.declined(errorPath)))) {
            const reported = await this.readError(errorPath);
            return toCodeResult(result, reported, req.timeoutMs ?? DEFAULT_TIMEOUT_MS);
          }
        }
      }
      await jail.writeFile(codePath, source);
      written = true;
      const argv =
        req.language === "python"
          ? [interp.python, "-u", join(RUNNERS_DIR, RUNNERS.python), code, error]
          : [
              interp.node,
              "--experimental-transform-types",
              "--disable-warning=ExperimentalWarning",
              "--import",
              pathToFileURL(join(RUNNERS_DIR, RUNNERS.typescript)).href,
              code,
            ];
      const env =
        req.language === "typescript"
          ? { ...req.env, SANDPIT_ERROR_FILE: error, SANDPIT_CODE_FILE: code }
          : req.env;
      const result = await this.spawn(argv, { cwd, env, timeoutMs: req.timeoutMs, signal });
      const reported = await this.readError(errorPath);
      return toCodeResult(result, reported, req.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    } finally {
      if (written) await jail.remove(codePath, false).catch(() => undefined);
      await jail.remove(errorPath, false).catch(() => undefined);
      // The next cell's interpreter starts now, after everything this one changed.
      if (req.language === "python") this.spare.fill();
    }
  }

  /** Installs packages into the sandbox's own state directory (kept across pause/resume). */
  async installPackages(req: InstallPackagesRequest): Promise<RunCommandResult> {
    if (req.packages.length === 0) {
      return {
        exitCode: 0,
        stdout: "",
        stderr: "",
        durationMs: 0,
        timedOut: false,
        truncated: false,
      };
    }
    const interp = await this.opts.interpreters;
    const { jail } = this.opts;
    let argv: string[];
    if (req.language === "python") {
      const target = jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/python`);
      await jail.mkdir(target);
      argv = [
        interp.python,
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        this.inSandbox(target),
        ...req.packages,
      ];
    } else {
      if (!interp.npmCli)
        throw new SandboxdError("EXECUTION_FAILED", "npm is not installed in this sandbox");
      const prefix = jail.resolve(`${jail.virtualRoot}/${STATE_DIR}`);
      await jail.mkdir(prefix);
      argv = [
        interp.node,
        interp.npmCli,
        "install",
        "--prefix",
        this.inSandbox(prefix),
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        ...req.packages,
      ];
    }
    const result = await this.spawn(argv, {
      cwd: await this.existingDir(undefined),
      timeoutMs: req.timeoutMs ?? 10 * 60_000,
    });
    if (req.language === "python") this.spare.discard();
    if (result.timedOut)
      throw new SandboxdError("TIMEOUT", `installing ${req.packages.join(" ")} timed out`);
    if (result.exitCode !== 0) {
      throw new SandboxdError(
        "EXECUTION_FAILED",
        `installing ${req.packages.join(" ")} failed (exit ${result.exitCode}): ${(result.stderr || result.stdout).slice(-2000)}`,
      );
    }
    return result;
  }

  /**
   * The environment every sandboxed process starts with: Sandpit's interpreters and installed
   * packages first, then the sandbox-wide variables, then the request's own.
   */
  processEnv(extra?: Record<string, string>): Record<string, string> {
    const { jail } = this.opts;
    const state = (sub: string) =>
      this.inSandbox(jail.resolve(`${jail.virtualRoot}/${STATE_DIR}/${sub}`));
    return {
      ...this.opts.baseEnv,
      PATH: `${state("bin")}:${this.opts.baseEnv.PATH ?? "/usr/local/bin:/usr/bin:/bin"}`,
      PYTHONUNBUFFERED: "1",
      PYTHONPATH: state("python"),
      NODE_PATH: state("node_modules"),
      ...this.sandboxEnv,
      ...extra,
    };
  }

  /** The interpreters, once the links processes rely on are in place. */
  interpreters(): Promise<Interpreters> {
    return this.opts.interpreters;
  }

  /** Resolves a working directory, which must exist inside the root. */
  async existingDir(cwd: string | undefined): Promise<JailPath> {
    const p = this.opts.jail.resolve(cwd ?? this.opts.jail.defaultDir);
    const fh = await this.opts.jail.openDir(p);
    await fh.close();
    return p;
  }

  /** The path processes use for a jail path (the virtual one when the root is mounted there). */
  inSandbox(p: JailPath): string {
    return this.opts.jail.hostPath(p);
  }

  /**
   * When the root is not mounted at /mnt/user-data (the local provider without bubblewrap),
   * the virtual prefix in command and code text is rewritten to the real root, as DeerFlow's
   * local mode does, so agents can use the same paths everywhere.
   */
  localise(text: string): string {
    const { jail } = this.opts;
    return jail.realRoot === jail.virtualRoot ? text : text.replace(this.rootRef, jail.realRoot);
  }

  /** The reverse, on output: agents see /mnt/user-data, never the host directory. */
  virtualise(text: string): string {
    const { jail } = this.opts;
    return jail.realRoot === jail.virtualRoot
      ? text
      : text.replaceAll(jail.realRoot, jail.virtualRoot);
  }

  /** Whether the spare runner declined the cell: what it started with has changed (spare-runner.ts). */
  private async declined(p: JailPath): Promise<boolean> {
    try {
      const { fh } = await this.opts.jail.openFileForRead(p);
      try {
        return (JSON.parse(await fh.readFile("utf8")) as { stale?: unknown }).stale === true;
      } finally {
        await fh.close();
      }
    } catch {
      return false;
    }
  }

  private async readError(
    p: JailPath,
  ): Promise<{ name: string; message: string; traceback?: string } | null> {
    try {
      const { fh, size } = await this.opts.jail.openFileForRead(p);
      try {
        if (size > 4 * 1024 * 1024) return null;
        const parsed: unknown = JSON.parse(await fh.readFile("utf8"));
        if (parsed && typeof parsed === "object" && "name" in parsed && "message" in parsed) {
          const e = parsed as Record<string, unknown>;
          return {
            name: String(e.name),
            message: this.virtualise(String(e.message)),
            ...(typeof e.traceback === "string" ? { traceback: this.virtualise(e.traceback) } : {}),
          };
        }
        return null;
      } finally {
        await fh.close();
      }
    } catch {
      return null;
    }
  }

  /** Runs `what`: a command line to start, or a spare interpreter already started. */
  private async spawn(
    what: string[] | ChildProcessWithoutNullStreams,
    o: {
      cwd: JailPath;
      env?: Record<string, string> | undefined;
      stdin?: string | undefined;
      timeoutMs?: number | undefined;
      onChunk?: ((s: "stdout" | "stderr", d: string, off: number) => void) | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<RunCommandResult> {
    const { jail } = this.opts;
    const onChunk = o.onChunk;
    const run = {
      stdin: o.stdin,
      timeoutMs: o.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      outputCapBytes: this.opts.outputCapBytes,
      // A chunk boundary can split a path; streamed output is masked chunk by chunk.
      onChunk:
        onChunk &&
        ((s: "stdout" | "stderr", d: string, off: number) => onChunk(s, this.virtualise(d), off)),
      signal: o.signal,
    };
    const file = Array.isArray(what) ? what[0]! : what.spawnfile;
    try {
      const r = Array.isArray(what)
        ? await runProcess({
            file,
            args: what.slice(1),
            cwd: jail.hostPath(o.cwd),
            env: this.processEnv(o.env),
            ...run,
          })
        : await superviseProcess(what, run);
      return { ...r, stdout: this.virtualise(r.stdout), stderr: this.virtualise(r.stderr) };
    } catch (err) {
      throw new SandboxdError(
        "EXECUTION_FAILED",
        `could not start ${file}: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
}

function toCodeResult(
  r: RunCommandResult,
  reported: { name: string; message: string; traceback?: string } | null,
  timeoutMs: number,
): CodeExecutionResult {
  if (r.timedOut) {
    throw new SandboxdError(
      "TIMEOUT",
      `code execution exceeded its timeout of ${timeoutMs} ms and was killed`,
    );
  }
  const success = r.exitCode === 0 && !reported;
  const result: CodeExecutionResult = {
    success,
    stdout: r.stdout,
    stderr: r.stderr,
    durationMs: r.durationMs,
  };
  const output = parseOutput(r.stdout);
  if (output !== undefined) result.output = output;
  if (!success) {
    result.error = reported ?? {
      name: "ExitError",
      // 137 without a timeout is SIGKILL from outside: in a container, almost always the OOM killer.
      message:
        r.exitCode === 137
          ? "process was killed (SIGKILL), most likely by the sandbox's memory limit"
          : `process exited with code ${r.exitCode}`,
      ...(r.stderr ? { traceback: r.stderr.slice(-8000) } : {}),
    };
  }
  return result;
}
