/**
 * The zod-free half of the sandboxd wire protocol: paths, limits, error codes and statuses, and
 * the shapes of responses (trusted by the SDK client). ./protocol.ts re-exports all of it beside
 * the request schemas the server validates with; a client that only calls sandboxd imports this
 * module and loads no schema library (the CLI's `exec` path starts in tens of milliseconds).
 */
import { posix } from "node:path";

/** Agents see the same paths on every provider; sandboxd maps them onto its root directory. */
export const VIRTUAL_ROOT = "/mnt/user-data";
export const VIRTUAL_WORKSPACE = `${VIRTUAL_ROOT}/workspace`;
export const VIRTUAL_DIRS = ["workspace", "uploads", "outputs"] as const;

const MAX_PATH_BYTES = 4096;
const MAX_NAME_BYTES = 255;

/**
 * Lexical half of path containment, shared by sandboxd and by SDK providers whose backend
 * (E2B, Daytona) would otherwise accept any path: absolute paths must lie under the virtual
 * root, relative ones are taken from `base` (the workspace). Returns the normalised virtual
 * path and its components under the root; throws INVALID_ARGUMENT otherwise. sandboxd then
 * also verifies what it opened, which no lexical check can.
 */
export function resolveVirtualPath(
  input: unknown,
  root: string = VIRTUAL_ROOT,
  base: string = VIRTUAL_WORKSPACE,
): { virtual: string; parts: string[] } {
  if (typeof input !== "string" || input.length === 0)
    throw new SandboxdError("INVALID_ARGUMENT", "path is required");
  if (input.includes("\0")) throw new SandboxdError("INVALID_ARGUMENT", "path contains a NUL byte");
  if (Buffer.byteLength(input) > MAX_PATH_BYTES) {
    throw new SandboxdError("INVALID_ARGUMENT", `path is longer than ${MAX_PATH_BYTES} bytes`);
  }
  const joined = input.startsWith("/") ? input : posix.join(base, input);
  const virtual = posix.normalize(joined).replace(/(.)\/+$/, "$1");
  if (virtual !== root && !virtual.startsWith(root === "/" ? "/" : root + "/")) {
    throw new SandboxdError("INVALID_ARGUMENT", `path ${JSON.stringify(input)} is outside ${root}`);
  }
  const parts = virtual.slice(root.length).split("/").filter(Boolean);
  if (parts.some((part) => Buffer.byteLength(part) > MAX_NAME_BYTES)) {
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      `a path component is longer than ${MAX_NAME_BYTES} bytes`,
    );
  }
  return { virtual, parts };
}

/**
 * Paths the AIO (DeerFlow) routes live under; `/v1/files` (native) is not one of them. A
 * DeerFlow capability URL opens these and nothing else of a sandbox (the provisioner checks).
 */
const AIO_PATH = /^\/v1\/(sandbox|shell|bash|file)(\/|$)/;

export function isAioPath(path: string): boolean {
  return AIO_PATH.test(path);
}

/**
 * A user or thread id, the same rule on every API that takes one (the SDK's create options, the
 * provisioner's native and DeerFlow bodies, the Sandbox resource's spec). 255 because DeerFlow
 * allows that much (its user ids derived from e-mail addresses run past 80), and 255 is also what
 * one path segment may hold, which a shared claim's `users/{user}/threads/{thread}` needs.
 * Ids are never label values as they are: labels carry a hash where an id does not fit.
 */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,255}$/;
export const ID_RULE = "1-255 of [A-Za-z0-9_-]";

/** An environment variable name, on every API that takes an environment. */
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const ENV_NAME_RULE = "environment variable names are [A-Za-z_][A-Za-z0-9_]*";

/** A package as pip or npm takes it: no whitespace, and not an option (see request-schemas.ts). */
export const PACKAGE_SPEC_PATTERN = /^[^\s-][^\s]*$/;

/** A TCP port inside a sandbox, as getHost, sandboxd's tunnel and the provisioner's ports route take one. */
export const PORT_RULE = "an integer from 1 to 65535";
export const isPort = (value: unknown): value is number =>
  Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65535;

export const PROTOCOL_VERSION = "1";
export const CAPABILITIES = [
  "commands",
  "commands.stream",
  "code",
  "files",
  "packages",
  "pty",
  "contexts",
  "drain",
] as const;

const MiB = 1024 * 1024;
/** Default cap on each captured output stream (stdout, stderr) of one command. */
export const DEFAULT_OUTPUT_CAP_BYTES = 10 * MiB;
/** Commands and code without a timeout are stopped after this long. */
export const DEFAULT_TIMEOUT_MS = 5 * 60_000;
export const MAX_TIMEOUT_MS = 24 * 60 * 60_000;
/** Longest command line or code body accepted in one request. */
export const MAX_SOURCE_BYTES = 4 * MiB;

export interface RunCommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  /** True when either stream went past the output cap and was cut. */
  truncated: boolean;
}

/** The last NDJSON line of a streamed command (its output went out in chunks before). */
export interface CommandExit {
  stream: "exit";
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

/** One NDJSON line of a streamed command: a chunk of output, the exit status, or an error. */
export type CommandStreamEvent =
  | { stream: "stdout" | "stderr"; data: string; offset: number }
  | CommandExit
  | { stream: "error"; error: ErrorBody };

export const LANGUAGES = ["python", "typescript"] as const;
export type Language = (typeof LANGUAGES)[number];

export interface CodeExecutionResult {
  success: boolean;
  /** The cell's result: see parseOutput. */
  output?: unknown;
  stdout: string;
  stderr: string;
  durationMs: number;
  error?: { name: string; message: string; traceback?: string };
}

/**
 * The contract's `output`: stdout parsed as JSON, or else its last non-empty line. Providers that
 * run code without sandboxd (E2B, Daytona) derive it the same way.
 */
export function parseOutput(stdout: string): unknown {
  const text = stdout.trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    const last = text.slice(text.lastIndexOf("\n") + 1).trim();
    if (last === text) return undefined;
    try {
      return JSON.parse(last);
    } catch {
      return undefined;
    }
  }
}

export type FileType = "file" | "dir" | "symlink" | "other";
export interface FileEntry {
  name: string;
  /** Virtual path, e.g. /mnt/user-data/workspace/a.txt. */
  path: string;
  type: FileType;
  size: number;
  modifiedMs: number;
  /** Permission bits (st_mode & 0o7777); absent from sandboxd versions before it was reported. */
  mode?: number;
}

/**
 * The credential of an `Authorization: Bearer <credential>` header, the one parser of it for
 * sandboxd and the provisioner: the scheme is case-insensitive (RFC 9110 §11.1), so `bearer` and
 * `BEARER` are the same as `Bearer`; surrounding whitespace is not part of the credential.
 */
export function bearerCredential(header: string | undefined): string | undefined {
  const credential = /^Bearer[ \t]+(.+)$/i.exec(header ?? "")?.[1]?.trim();
  return credential || undefined;
}

/**
 * Every error code a Sandpit API answers with (sandboxd, the provisioner) and every code the
 * SDK's SandboxError carries: one vocabulary end to end, so a code means the same thing
 * wherever it is seen. Not every code comes from every component: CONNECTION_FAILED is the
 * SDK's own (nothing answered), UPSTREAM_UNAVAILABLE the provisioner's (a sandbox did not),
 * NOT_SUPPORTED a backend's that lacks a feature (its message names the feature).
 */
export const ERROR_CODES = [
  "INVALID_ARGUMENT",
  "UNAUTHORIZED",
  "NOT_FOUND",
  "CONFLICT",
  "PAYLOAD_TOO_LARGE",
  "CAPACITY_EXCEEDED",
  "RATE_LIMITED",
  "TIMEOUT",
  "EXECUTION_FAILED",
  "UPSTREAM_UNAVAILABLE",
  "CONNECTION_FAILED",
  "NOT_SUPPORTED",
  "INTERNAL",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  /**
   * On the refusal of a draining sandboxd (`POST /v1/drain`): the request was not run, and
   * sandboxd is exiting. Start the sandbox again and send it again.
   */
  draining?: true;
}

/** The HTTP status each code is answered with. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  INVALID_ARGUMENT: 400,
  UNAUTHORIZED: 401,
  NOT_FOUND: 404,
  CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  CAPACITY_EXCEEDED: 429,
  RATE_LIMITED: 429,
  TIMEOUT: 504,
  EXECUTION_FAILED: 422,
  UPSTREAM_UNAVAILABLE: 502,
  CONNECTION_FAILED: 502,
  NOT_SUPPORTED: 501,
  INTERNAL: 500,
};

/** An error sandboxd reports to its caller with a code and a message safe to show. */
export class SandboxdError extends Error {
  readonly code: ErrorCode;
  /** Refused because sandboxd is draining (ErrorBody.draining). */
  readonly draining: boolean;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; draining?: boolean }) {
    super(message, options);
    this.name = "SandboxdError";
    this.code = code;
    this.draining = options?.draining ?? false;
  }
}

// --- Draining: an idle stop decided inside sandboxd ------------------------------------------

/**
 * `POST /v1/drain` (its body: ./protocol.ts DrainRequest): sandboxd stops itself if, at that
 * moment, nothing runs in it (no request, connection, process, terminal, code cell or session
 * command) and nothing has for at least `idleMs`. The check and the switch are one step of
 * sandboxd's event loop, so no work can start in between: from then on every request and upgrade
 * is refused (`draining` in the error body, code CONNECTION_FAILED) and sandboxd exits with
 * DRAINED_EXIT_CODE, which stops its container. An idle reaper calls this instead of stopping a
 * container from outside, which would cut whatever started after it last looked at the idle
 * time. `idleMs: 0` drains a sandbox that is idle now, however briefly (a capacity eviction).
 * Answers `{drained, idleMs}`; a sandboxd that drains already answers `drained: true`.
 */
export const DRAIN_PATH = "/v1/drain";
export interface DrainResponse {
  drained: boolean;
  /** The idle time sandboxd measured (0 while busy). */
  idleMs: number;
}
/**
 * sandboxd's exit status after a drain (EX_TEMPFAIL): nothing ran when it exited, so a request
 * cut off by that exit was never run and may be sent again once the sandbox is started.
 */
export const DRAINED_EXIT_CODE = 75;

/** What a draining sandboxd answers every request and upgrade with. */
export function drainingError(): SandboxdError {
  return new SandboxdError(
    "CONNECTION_FAILED",
    "sandboxd is stopping (it was idle) and ran nothing: start the sandbox again and retry",
    { draining: true },
  );
}

export interface HealthResponse {
  ok: true;
  version: string;
  protocol: string;
  capabilities: readonly string[];
  /**
   * Milliseconds since the sandbox last did anything (./activity.ts): 0 while a request or
   * connection is open or a process, terminal, code cell or session command runs.
   */
  idleMs: number;
  /** True once a drain succeeded: sandboxd refuses all work and is exiting. */
  draining?: boolean;
  /**
   * Only when sandboxd was given a probe target (SANDBOXD_ISOLATION_PROBE): whether the
   * sandbox's network policy is in force yet (../src/isolation.ts). /readyz answers 503 until it is.
   */
  isolated?: boolean;
}

/** /readyz: 200 once sandboxd serves and its network policy holds (when it was told to check), else 503. */
export interface ReadyResponse {
  ready: boolean;
  /** Why not, when not. */
  reason?: string;
}

/** The port sandboxd listens on in the sandbox image (and so in every sandbox pod). */
export const SANDBOXD_PORT = 8080;

// --- Terminals (PTY): see docs/terminals.md -----------------------------------------------------

/** Columns and rows a terminal may have. */
export const PTY_MAX_SIZE = 1000;
/** What a terminal's `cols` or `rows` must be (the server's schema and the SDK's check say it so). */
export const ptyDimensionRule = (name: string) =>
  `${name} must be an integer from 1 to ${PTY_MAX_SIZE}`;

/** A terminal as listed: a process listing's entry (`ProcessEntry`), with `pty: true`. */
export type PtyInfo = Omit<ProcessEntry, "pty" | "tag"> & { pty: true };

export type PtyServerMessage = { type: "exit"; exitCode: number };

/** WebSocket close codes of a terminal connection beyond RFC 6455's own. */
export const PTY_CLOSE = {
  /** A text frame that is not a valid control message (RFC 6455's policy violation). */
  badMessage: 1008,
  /** sandboxd is stopping. */
  goingAway: 1001,
  /** No terminal has that pid (4000 + the HTTP status NOT_FOUND answers with). */
  notFound: 4404,
} as const;

export interface ContextInfo {
  id: string;
  language: Language;
  /** Virtual path of the interpreter's starting directory. */
  cwd: string;
  createdMs: number;
  lastUsedMs: number;
  /** A cell is running (or waiting). */
  busy: boolean;
}

/** One output of a cell in its formats: the last expression's value, or a display call. */
export interface CellResult {
  isMainResult: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** Base64. */
  png?: string;
  /** Base64. */
  jpeg?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  table?: { columns: string[]; rows: unknown[][] };
  extra?: Record<string, unknown>;
}

/**
 * One NDJSON line of `POST /v1/contexts/{id}/execute`: output as it comes, each result, the
 * cell's exception (the context lives on), then `end`; or `failure` when the cell could not
 * finish (the interpreter died: the context is gone).
 */
export type CellEvent =
  | { type: "stdout" | "stderr"; data: string }
  | { type: "result"; result: CellResult }
  | { type: "error"; error: { name: string; value: string; traceback: string } }
  | {
      type: "end";
      durationMs: number;
      /** The cell ran past its timeout and was interrupted. */
      timedOut: boolean;
      /** Output went past the per-cell cap and was cut. */
      truncated: boolean;
    }
  | { type: "failure"; error: ErrorBody };

/** Most paths one glob answers; more sets `truncated`. */
export const MAX_GLOB_RESULTS = 10_000;

export interface GlobResponse {
  paths: string[];
  /** A bound (the result limit or the walk's entry cap) cut the answer short. */
  truncated: boolean;
}

export const MAX_GREP_MATCHES = 10_000;

export interface GrepResponse {
  matches: { path: string; line: number; text: string }[];
  /** `maxMatches` was reached, or the walk hit its entry cap. */
  truncated: boolean;
}

/** One NDJSON line of GET /v1/files/watch; `error` ends the stream. */
export type WatchStreamEvent =
  | { type: "create" | "write" | "remove" | "rename"; path: string }
  | { type: "error"; error: ErrorBody };

/** Signals a client may send to a background process's group; the SDK's ProcessSignal. */
export const PROCESS_SIGNALS = [
  "SIGTERM",
  "SIGKILL",
  "SIGINT",
  "SIGHUP",
  "SIGQUIT",
  "SIGUSR1",
  "SIGUSR2",
] as const;
export type ProcessSignalName = (typeof PROCESS_SIGNALS)[number];

/** Background processes running at once in one sandbox (SANDBOXD_MAX_PROCESSES). */
export const DEFAULT_MAX_PROCESSES = 200;
/** Output kept per background process for replay (SANDBOXD_PROCESS_OUTPUT_BYTES). */
export const DEFAULT_PROCESS_OUTPUT_BYTES = MiB;
/** Output kept for all background processes together (SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES). */
export const DEFAULT_PROCESS_OUTPUT_TOTAL_BYTES = 64 * MiB;
/** Largest stdin chunk in one request, and most stdin a process may leave unread. */
export const MAX_STDIN_BYTES = 4 * MiB;

/** A background process as `GET /v1/processes` lists it. */
export interface ProcessEntry {
  /** The OS pid of the process-group leader (`/bin/sh -c <command>`). */
  pid: number;
  command: string;
  /** Virtual path. */
  cwd: string;
  tag?: string;
  pty: boolean;
  startedAtMs: number;
  /** Set once the process has exited. */
  exitCode?: number;
}

/** The last NDJSON line of a background process's output stream. */
export interface ProcessExit {
  stream: "exit";
  exitCode: number;
  durationMs: number;
  /** Killed at its `timeoutMs`. */
  timedOut: boolean;
}

/**
 * One NDJSON line of a background process's output (`GET /v1/processes/:pid/output`, or a start
 * with `Accept: application/x-ndjson`). Unlike a one-shot command's stream, offsets count bytes of
 * the process's combined output (stdout and stderr interleaved as they arrived), so one number
 * says where a reconnecting reader resumes. `attached` comes first; `dropped` says which bytes the
 * ring no longer held (at attach, or later for a reader that fell behind).
 */
export type ProcessStreamEvent =
  | { stream: "attached"; pid: number; offset: number; droppedBytes: number }
  | { stream: "dropped"; offset: number; bytes: number }
  | { stream: "stdout" | "stderr"; data: string; offset: number }
  | ProcessExit
  | { stream: "error"; error: ErrorBody };
