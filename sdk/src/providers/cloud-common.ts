/**
 * What the cloud providers (E2B, Daytona), which run code without sandboxd, share: the virtual
 * path rule, port and environment checks, shell quoting, package installs, the per-thread
 * sandbox identity, and how a network failure is recognised. Neither service knows about
 * /mnt/user-data, so these providers enforce it on the client (lexically, with the same
 * function sandboxd uses) before any request leaves.
 */
import { randomUUID } from "node:crypto";
import {
  ENV_NAME_PATTERN,
  PTY_MAX_SIZE,
  resolveVirtualPath,
  SandboxdError,
  VIRTUAL_DIRS,
  VIRTUAL_ROOT,
  VIRTUAL_WORKSPACE,
} from "@sandpit/sandboxd/wire";
import { validateCreate } from "../create-options.ts";
import { SandboxError } from "../errors.ts";
import type { PtySize, SandboxCreateOptions, SandboxLanguage } from "../types.ts";

export { VIRTUAL_ROOT, VIRTUAL_WORKSPACE };
export const VIRTUAL_LAYOUT = VIRTUAL_DIRS.map((d) => `${VIRTUAL_ROOT}/${d}`);

/** Metadata / label keys that tie a cloud sandbox to a Sandpit user and thread. */
export const META = {
  user: "sandpit-user",
  thread: "sandpit-thread",
  language: "sandpit-language",
  workdir: "sandpit-workdir",
  timeoutMs: "sandpit-timeout-ms",
} as const;

/** Package installs get longer. */
export const INSTALL_TIMEOUT_MS = 10 * 60_000;

/** The absolute virtual path for `input`, or INVALID_ARGUMENT when it leaves /mnt/user-data. */
export function virtualPath(input: unknown): string {
  try {
    return resolveVirtualPath(input).virtual;
  } catch (err) {
    if (err instanceof SandboxdError) throw new SandboxError(err.message, "INVALID_ARGUMENT", err);
    throw err;
  }
}

export function checkEnvs(envs: Record<string, string> | undefined): void {
  for (const name of Object.keys(envs ?? {})) {
    if (!ENV_NAME_PATTERN.test(name))
      throw new SandboxError(
        `invalid environment variable name ${JSON.stringify(name)}`,
        "INVALID_ARGUMENT",
      );
  }
}

/** The bounds sandboxd holds terminals to, checked before a cloud service is asked. */
export function checkPtySize(size: unknown): PtySize {
  const s = size as Partial<PtySize> | undefined;
  const ok = (n: unknown) =>
    typeof n === "number" && Number.isInteger(n) && n > 0 && n <= PTY_MAX_SIZE;
  if (!s || !ok(s.cols) || !ok(s.rows))
    throw new SandboxError(
      `cols and rows must be integers from 1 to ${PTY_MAX_SIZE}`,
      "INVALID_ARGUMENT",
    );
  return { cols: s.cols!, rows: s.rows! };
}

/** Terminal input as bytes. */
export function inputBytes(data: unknown): Uint8Array {
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  throw new SandboxError("input must be a string or a Uint8Array", "INVALID_ARGUMENT");
}

/** POSIX single-quote quoting. */
export function shq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The shell command that installs packages the way the contract says (pip / npm). */
export function installCommand(
  language: "python" | "typescript",
  packages: string[],
  npmPrefix?: string,
  pipTarget?: string,
): string {
  const list = packages.map(shq).join(" ");
  if (language === "python") {
    // With --target, an image's PIP_USER=1 would make pip refuse ("cannot combine --user and --target").
    const target = pipTarget ? ` --target ${shq(pipTarget)}` : "";
    return `${pipTarget ? "PIP_USER=0 " : ""}python3 -m pip install --no-input --disable-pip-version-check${target} ${list}`;
  }
  return `npm install --no-audit --no-fund --loglevel=error${npmPrefix ? ` --prefix ${shq(npmPrefix)}` : ""} ${list}`;
}

export function installFailed(
  packages: string[],
  r: { exitCode: number; stdout: string; stderr: string },
): SandboxError {
  return new SandboxError(
    `installing ${packages.join(" ")} failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().slice(-2000)}`,
    "EXECUTION_FAILED",
  );
}

/** Strips ANSI colour codes (Jupyter tracebacks carry them). */
export function stripAnsi(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, "");
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
  "ETIMEDOUT",
  "ECONNABORTED",
  "UND_ERR_SOCKET",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_CLOSED",
  "ERR_SOCKET_CONNECTION_TIMEOUT",
]);

/** The network error code (ECONNREFUSED, ...) anywhere in an error's cause chain, if any. */
export function networkErrorCode(err: unknown): string | undefined {
  const seen = new Set<unknown>();
  let e: unknown = err;
  while (e && typeof e === "object" && !seen.has(e)) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NETWORK_CODES.has(code)) return code;
    // AggregateError (happy-eyeballs connect attempts) carries the real failures in .errors.
    const inner = (e as { errors?: unknown[] }).errors;
    if (Array.isArray(inner))
      for (const x of inner) {
        const c = networkErrorCode(x);
        if (c) return c;
      }
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** What an aborted call rejects with: the signal's reason (an AbortError by default). */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function elapsed(started: number): number {
  return Math.max(0, Math.round(performance.now() - started));
}

/** What a cloud sandbox does on every create: make the working directory, install packages. */
export interface ThreadSandbox {
  setup(
    language: SandboxLanguage,
    packages: string[] | undefined,
    workingDirectory: string,
  ): Promise<void>;
}

/**
 * The create() both cloud providers share: validate, then find or create the thread's sandbox,
 * with concurrent creates for one (user, thread) in this process sharing one attempt.
 */
export async function createForThread<I extends ThreadSandbox>(
  pending: Map<string, Promise<I>>,
  options: SandboxCreateOptions,
  findOrCreate: (
    o: SandboxCreateOptions,
    userId: string,
    threadId: string,
    workingDirectory: string,
  ) => Promise<I>,
): Promise<I> {
  const o = validateCreate(options);
  checkEnvs(o.envs);
  const workingDirectory = o.workingDirectory ? virtualPath(o.workingDirectory) : VIRTUAL_WORKSPACE;
  const userId = o.userId ?? "default";
  const threadId = o.threadId ?? randomUUID();
  const key = `${userId}.${threadId}`;
  const inFlight = pending.get(key);
  if (inFlight) {
    const inst = await inFlight;
    await inst.setup(o.language, o.packages, workingDirectory);
    return inst;
  }
  const p = findOrCreate(o, userId, threadId, workingDirectory).finally(() => pending.delete(key));
  pending.set(key, p);
  return p;
}
