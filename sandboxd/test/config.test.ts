/** readSettings: defaults, every rule and its message, every problem listed at once. */
import { describe, expect, it } from "vitest";
import { readSettings } from "../src/config.ts";

const problems = (env: Record<string, string>) => {
  try {
    readSettings(env);
  } catch (err) {
    const [head, ...lines] = (err as Error).message.split("\n  ");
    expect(head).toBe("invalid sandboxd settings:");
    return lines;
  }
  throw new Error("no error");
};

describe("readSettings", () => {
  it("fills every default and ignores other variables", () => {
    expect(readSettings({ PATH: "/bin" })).toStrictEqual({
      SANDBOXD_LISTEN: "0.0.0.0:8080",
      SANDBOXD_ROOT: "/mnt/user-data",
      SANDBOXD_TOKEN_STDIN: "0",
      SANDBOXD_OUTPUT_CAP_BYTES: 10 * 1024 * 1024,
      SANDBOXD_ENV: {},
      SANDBOXD_AIO_PATHS: "jail",
      SANDBOXD_AIO_NO_AUTH: "0",
      SANDBOXD_AIO_MAX_SESSIONS: 32,
      SANDBOXD_AIO_SESSION_IDLE_SECONDS: 1800,
      SANDBOXD_MAX_TERMINALS: 32,
      SANDBOXD_TERMINAL_IDLE_SECONDS: 1800,
      SANDBOXD_MAX_CONTEXTS: 16,
      SANDBOXD_CONTEXT_IDLE_SECONDS: 1800,
      SANDBOXD_MAX_PROCESSES: 200,
      SANDBOXD_PROCESS_OUTPUT_BYTES: 1024 * 1024,
      SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: 64 * 1024 * 1024,
      SANDBOXD_LOG_LEVEL: "info",
    });
  });

  it("takes what is given, numbers as Number() reads them", () => {
    const s = readSettings({
      SANDBOXD_LISTEN: "unix:/run/s.sock",
      SANDBOXD_ROOT: "/srv/x",
      SANDBOXD_TOKEN: "t".repeat(32),
      SANDBOXD_TOKEN_FILE: "",
      SANDBOXD_TOKEN_SHA256: "a".repeat(64),
      SANDBOXD_TOKEN_STDIN: "detached",
      SANDBOXD_OUTPUT_CAP_BYTES: "0x10",
      SANDBOXD_ENV: ' {"A":"1","__proto__":"x"} ',
      SANDBOXD_AIO_PATHS: "any",
      SANDBOXD_AIO_NO_AUTH: "1",
      SANDBOXD_AIO_MAX_SESSIONS: " 12 ",
      SANDBOXD_AIO_SESSION_IDLE_SECONDS: "0.5",
      SANDBOXD_MAX_TERMINALS: "1024.0",
      SANDBOXD_MAX_PROCESSES: "1e3",
      SANDBOXD_LOG_LEVEL: "silent",
    });
    expect(s).toMatchObject({
      SANDBOXD_LISTEN: "unix:/run/s.sock",
      SANDBOXD_ROOT: "/srv/x",
      SANDBOXD_TOKEN: "t".repeat(32),
      SANDBOXD_TOKEN_FILE: "",
      SANDBOXD_TOKEN_SHA256: "a".repeat(64),
      SANDBOXD_TOKEN_STDIN: "detached",
      SANDBOXD_OUTPUT_CAP_BYTES: 16,
      SANDBOXD_AIO_PATHS: "any",
      SANDBOXD_AIO_NO_AUTH: "1",
      SANDBOXD_AIO_MAX_SESSIONS: 12,
      SANDBOXD_AIO_SESSION_IDLE_SECONDS: 0.5,
      SANDBOXD_MAX_TERMINALS: 1024,
      SANDBOXD_MAX_PROCESSES: 1000,
      SANDBOXD_LOG_LEVEL: "silent",
    });
    expect(s.SANDBOXD_ENV).toStrictEqual({ A: "1" });
  });

  it.each([
    [{ SANDBOXD_LISTEN: "nope" }, "SANDBOXD_LISTEN: expected host:port or unix:/absolute/path"],
    [{ SANDBOXD_LISTEN: "unix:x" }, "SANDBOXD_LISTEN: expected host:port or unix:/absolute/path"],
    [{ SANDBOXD_LISTEN: "a:b:1" }, "SANDBOXD_LISTEN: expected host:port or unix:/absolute/path"],
    [{ SANDBOXD_LISTEN: "a:1\n" }, "SANDBOXD_LISTEN: expected host:port or unix:/absolute/path"],
    [{ SANDBOXD_ROOT: "" }, "SANDBOXD_ROOT: must be an absolute path"],
    [{ SANDBOXD_TOKEN: "short" }, "SANDBOXD_TOKEN: the token must be at least 32 characters"],
    [
      { SANDBOXD_TOKEN_SHA256: "A".repeat(64) },
      "SANDBOXD_TOKEN_SHA256: the token's SHA-256 as 64 lowercase hex digits",
    ],
    [
      { SANDBOXD_TOKEN_STDIN: "2" },
      'SANDBOXD_TOKEN_STDIN: Invalid option: expected one of "0"|"1"|"detached"',
    ],
    [
      { SANDBOXD_AIO_PATHS: "x" },
      'SANDBOXD_AIO_PATHS: Invalid option: expected one of "jail"|"any"',
    ],
    [
      { SANDBOXD_LOG_LEVEL: "loud" },
      'SANDBOXD_LOG_LEVEL: Invalid option: expected one of "fatal"|"error"|"warn"|"info"|"debug"|"trace"|"silent"',
    ],
    [{ SANDBOXD_ENV: "" }, "SANDBOXD_ENV: must be a JSON object of strings"],
    [{ SANDBOXD_ENV: "[]" }, "SANDBOXD_ENV: must be a JSON object of strings"],
    [{ SANDBOXD_ENV: "null" }, "SANDBOXD_ENV: must be a JSON object of strings"],
    [{ SANDBOXD_ENV: '{"a":1}' }, "SANDBOXD_ENV: must be a JSON object of strings"],
    [
      { SANDBOXD_OUTPUT_CAP_BYTES: "abc" },
      "SANDBOXD_OUTPUT_CAP_BYTES: Invalid input: expected number, received NaN",
    ],
    [
      { SANDBOXD_TERMINAL_IDLE_SECONDS: "1e400" },
      "SANDBOXD_TERMINAL_IDLE_SECONDS: Invalid input: expected number, received Infinity",
    ],
    [
      { SANDBOXD_OUTPUT_CAP_BYTES: "" },
      "SANDBOXD_OUTPUT_CAP_BYTES: Too small: expected number to be >0",
    ],
    [
      { SANDBOXD_OUTPUT_CAP_BYTES: "-1.5" },
      "SANDBOXD_OUTPUT_CAP_BYTES: Invalid input: expected int, received number",
    ],
    [
      { SANDBOXD_CONTEXT_IDLE_SECONDS: "1e-400" },
      "SANDBOXD_CONTEXT_IDLE_SECONDS: Too small: expected number to be >0",
    ],
    [
      { SANDBOXD_MAX_TERMINALS: "-0" },
      "SANDBOXD_MAX_TERMINALS: Too small: expected number to be >=1",
    ],
    [
      { SANDBOXD_MAX_PROCESSES: "10001" },
      "SANDBOXD_MAX_PROCESSES: Too big: expected number to be <=10000",
    ],
    [
      { SANDBOXD_PROCESS_OUTPUT_BYTES: "10" },
      "SANDBOXD_PROCESS_OUTPUT_BYTES: Too small: expected number to be >=4096",
    ],
    [
      { SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: "99999999999999999999" },
      "SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: Too big: expected int to be <=9007199254740991",
    ],
  ])("refuses %o", (env, message) => {
    expect(problems(env)).toEqual([message]);
  });

  it("lists every problem, an integer's bounds beside its range", () => {
    expect(
      problems({
        SANDBOXD_LISTEN: "x",
        SANDBOXD_TOKEN: "y",
        SANDBOXD_MAX_CONTEXTS: "1000.5",
        SANDBOXD_MAX_TERMINALS: "-99999999999999999999",
        SANDBOXD_AIO_MAX_SESSIONS: "99999999999999999999",
      }),
    ).toEqual([
      "SANDBOXD_LISTEN: expected host:port or unix:/absolute/path",
      "SANDBOXD_TOKEN: the token must be at least 32 characters",
      "SANDBOXD_AIO_MAX_SESSIONS: Too big: expected int to be <=9007199254740991",
      "SANDBOXD_AIO_MAX_SESSIONS: Too big: expected number to be <=1024",
      "SANDBOXD_MAX_TERMINALS: Too small: expected int to be >=-9007199254740991",
      "SANDBOXD_MAX_TERMINALS: Too small: expected number to be >=1",
      "SANDBOXD_MAX_CONTEXTS: Invalid input: expected int, received number",
    ]);
  });
});
