/**
 * sandboxd reads its settings from the environment (the natural interface for a container
 * entrypoint and for a parent process alike), validated strictly so a typo fails at start-up.
 *
 * Checked by hand, not by a zod schema: building a zod schema of this size (and loading zod for
 * it) was about a fifth of sandboxd's start-up CPU and 2 MiB of its idle memory, every start
 * (bench/RESULTS.md, "A lean sandboxd"). The messages are the ones the zod schema gave, and
 * sandboxd/test/config.test.ts holds every rule.
 */
import {
  DEFAULT_MAX_PROCESSES,
  DEFAULT_OUTPUT_CAP_BYTES,
  DEFAULT_PROCESS_OUTPUT_BYTES,
  DEFAULT_PROCESS_OUTPUT_TOTAL_BYTES,
  VIRTUAL_ROOT,
} from "./wire.ts";

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

export interface Settings {
  /** host:port (port 0 picks a free one, reported on stdout) or unix:/path/to/socket. */
  SANDBOXD_LISTEN: string;
  /** Directory mapped to /mnt/user-data (in an image they are the same). */
  SANDBOXD_ROOT: string;
  /** At least 32 characters. */
  SANDBOXD_TOKEN?: string | undefined;
  SANDBOXD_TOKEN_FILE?: string | undefined;
  /**
   * The token's SHA-256 (hex) instead of the token: what a pod is given, so the token itself is
   * in no environment the sandbox's code can read (/proc/1/environ).
   */
  SANDBOXD_TOKEN_SHA256?: string | undefined;
  /**
   * "1": read the token from the first line of stdin and exit when stdin closes (parent gone).
   * "detached": read it the same way but outlive the parent (the local provider's sandboxes
   * keep running between the processes that use them; a signal stops them).
   */
  SANDBOXD_TOKEN_STDIN: "0" | "1" | "detached";
  SANDBOXD_OUTPUT_CAP_BYTES: number;
  /** JSON object of variables every process in this sandbox gets. */
  SANDBOXD_ENV: Record<string, string>;
  /**
   * Where AIO file routes (/v1/file/*) and shell working directories may point: `jail` keeps them
   * under the sandbox root, as the native API does (the local provider, where the host is outside
   * the sandbox); `any` allows any path the sandbox user can reach (a container or pod, where bash
   * can reach them anyway).
   */
  SANDBOXD_AIO_PATHS: "jail" | "any";
  /**
   * "1": answer the AIO routes and /v1/sandbox without a token (DeerFlow's local container
   * backend sends none). Native routes still need the token, and are closed when none is set.
   */
  SANDBOXD_AIO_NO_AUTH: "0" | "1";
  /** Persistent shell sessions kept at once, and how long an idle one lives. */
  SANDBOXD_AIO_MAX_SESSIONS: number;
  SANDBOXD_AIO_SESSION_IDLE_SECONDS: number;
  /** Terminals (PTYs) running at once, and how long one without clients or input lives. */
  SANDBOXD_MAX_TERMINALS: number;
  SANDBOXD_TERMINAL_IDLE_SECONDS: number;
  /** Code contexts (persistent interpreters) kept at once, and how long an idle one lives. */
  SANDBOXD_MAX_CONTEXTS: number;
  SANDBOXD_CONTEXT_IDLE_SECONDS: number;
  /** Background processes: how many run at once, and the output kept for late readers. */
  SANDBOXD_MAX_PROCESSES: number;
  SANDBOXD_PROCESS_OUTPUT_BYTES: number;
  SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: number;
  SANDBOXD_LOG_LEVEL: (typeof LOG_LEVELS)[number];
  /**
   * host:port of a server this sandbox's network policy must refuse (the operator sets it: the
   * API server's endpoint, say). Until a connection there fails, sandboxd says it is not
   * isolated yet (./isolation.ts): /healthz's `isolated`, and /readyz answers 503.
   */
  SANDBOXD_ISOLATION_PROBE?: string | undefined;
}

/** Each setting's problems (empty when it is fine) and its value. */
type Rule<T> = (raw: string | undefined, problems: string[]) => T;

const text =
  (fallback: string | undefined, test?: (s: string) => boolean, message?: string): Rule<string> =>
  (raw, problems) => {
    if (raw === undefined) return fallback as string;
    if (test && !test(raw)) problems.push(message!);
    return raw;
  };

const oneOf =
  <const T extends readonly string[]>(values: T, fallback: T[number]): Rule<T[number]> =>
  (raw, problems) => {
    if (raw === undefined) return fallback;
    if (!values.includes(raw))
      problems.push(
        `Invalid option: expected one of ${values.map((v) => JSON.stringify(v)).join("|")}`,
      );
    return raw;
  };

/**
 * A number as `Number()` reads the text (so "" is 0, "0x10" is 16): finite, then an integer
 * where asked (a fraction stops there; a safe integer's bounds do not), then its range.
 */
const num =
  (
    fallback: number,
    o: { int?: boolean; positive?: boolean; min?: number; max?: number },
  ): Rule<number> =>
  (raw, problems) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n)) {
      problems.push(`Invalid input: expected number, received ${String(n)}`);
      return n;
    }
    if (o.int) {
      if (!Number.isInteger(n)) {
        problems.push("Invalid input: expected int, received number");
        return n;
      }
      if (n > Number.MAX_SAFE_INTEGER)
        problems.push(`Too big: expected int to be <=${Number.MAX_SAFE_INTEGER}`);
      if (n < Number.MIN_SAFE_INTEGER)
        problems.push(`Too small: expected int to be >=${Number.MIN_SAFE_INTEGER}`);
    }
    if (o.positive && !(n > 0)) problems.push("Too small: expected number to be >0");
    if (o.min !== undefined && n < o.min)
      problems.push(`Too small: expected number to be >=${o.min}`);
    if (o.max !== undefined && n > o.max)
      problems.push(`Too big: expected number to be <=${o.max}`);
    return n;
  };

const envObject: Rule<Record<string, string>> = (raw, problems) => {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw ?? "{}");
  } catch {
    parsed = undefined;
  }
  const out: Record<string, string> = {};
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    problems.push("must be a JSON object of strings");
    return out;
  }
  for (const [k, v] of Object.entries(parsed)) {
    if (typeof v !== "string") {
      problems.push("must be a JSON object of strings");
      return {};
    }
    out[k] = v;
  }
  return out;
};

const THIRTY_MINUTES = 30 * 60;

const RULES: { [K in keyof Settings]-?: Rule<Settings[K]> } = {
  SANDBOXD_LISTEN: text(
    "0.0.0.0:8080",
    (s) => /^([^:]+:\d+|unix:\/.+)$/.test(s),
    "expected host:port or unix:/absolute/path",
  ),
  SANDBOXD_ROOT: text(VIRTUAL_ROOT, (s) => s.startsWith("/"), "must be an absolute path"),
  SANDBOXD_TOKEN: text(
    undefined,
    (s) => s.length >= 32,
    "the token must be at least 32 characters",
  ),
  SANDBOXD_TOKEN_FILE: text(undefined),
  SANDBOXD_TOKEN_SHA256: text(
    undefined,
    (s) => /^[0-9a-f]{64}$/.test(s),
    "the token's SHA-256 as 64 lowercase hex digits",
  ),
  SANDBOXD_TOKEN_STDIN: oneOf(["0", "1", "detached"], "0"),
  SANDBOXD_OUTPUT_CAP_BYTES: num(DEFAULT_OUTPUT_CAP_BYTES, { int: true, positive: true }),
  SANDBOXD_ENV: envObject,
  SANDBOXD_AIO_PATHS: oneOf(["jail", "any"], "jail"),
  SANDBOXD_AIO_NO_AUTH: oneOf(["0", "1"], "0"),
  SANDBOXD_AIO_MAX_SESSIONS: num(32, { int: true, min: 1, max: 1024 }),
  SANDBOXD_AIO_SESSION_IDLE_SECONDS: num(THIRTY_MINUTES, { positive: true }),
  SANDBOXD_MAX_TERMINALS: num(32, { int: true, min: 1, max: 1024 }),
  SANDBOXD_TERMINAL_IDLE_SECONDS: num(THIRTY_MINUTES, { positive: true }),
  SANDBOXD_MAX_CONTEXTS: num(16, { int: true, min: 1, max: 256 }),
  SANDBOXD_CONTEXT_IDLE_SECONDS: num(THIRTY_MINUTES, { positive: true }),
  SANDBOXD_MAX_PROCESSES: num(DEFAULT_MAX_PROCESSES, { int: true, min: 1, max: 10_000 }),
  SANDBOXD_PROCESS_OUTPUT_BYTES: num(DEFAULT_PROCESS_OUTPUT_BYTES, { int: true, min: 4096 }),
  SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: num(DEFAULT_PROCESS_OUTPUT_TOTAL_BYTES, {
    int: true,
    min: 4096,
  }),
  SANDBOXD_LOG_LEVEL: oneOf(LOG_LEVELS, "info"),
  SANDBOXD_ISOLATION_PROBE: text(
    undefined,
    (s) => /^(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}$/.test(s),
    "expected host:port (an IPv6 address in brackets)",
  ),
};

/**
 * The settings in `env` (anything else in it is ignored), each missing one at its default. Throws
 * one error listing every problem, a line each (`NAME: what is wrong`).
 */
export function readSettings(env: NodeJS.ProcessEnv): Settings {
  const lines: string[] = [];
  const out: Record<string, unknown> = {};
  for (const [name, rule] of Object.entries(RULES) as [string, Rule<unknown>][]) {
    const problems: string[] = [];
    const value = rule(env[name], problems);
    for (const p of problems) lines.push(`${name}: ${p}`);
    if (value !== undefined) out[name] = value;
  }
  if (lines.length) throw new Error(`invalid sandboxd settings:\n  ${lines.join("\n  ")}`);
  return out as unknown as Settings;
}
