/**
 * A pytest suite as vitest tests: collected when `loadPytest` runs (so the count is pytest's
 * own), and each pytest test run in its own pytest process with the target in its environment.
 * A failure carries pytest's report; a skip carries pytest's reason.
 *
 * Suites: the one beside this file (DeerFlow's pinned `agent-sandbox` client, unchanged), run by
 * test/deerflow/agent-sandbox.test.ts against sandbox_urls from the provisioner's DeerFlow API on
 * the cluster and by test/docker/deerflow-local.test.ts against the sandbox image started the way
 * DeerFlow's own local container backend starts it; and the E2B conformance suite
 * (test/e2b-compat/conformance_test.py).
 */
import { execFile } from "node:child_process";
import { describe, test } from "vitest";
import { REQUIREMENTS, ensureVenv } from "./python.ts";

const HERE = new URL(".", import.meta.url).pathname;
/** Per pytest test: the 20 MiB round trip and a venv inside the sandbox take the longest. */
export const PYTEST_TIMEOUT_MS = 240_000;

/** The environment variables the DeerFlow suite's fixtures read (conftest.py). */
export interface SuiteUrls {
  SANDPIT_SANDBOX_URL: string;
  SANDPIT_OTHER_SANDBOX_URL: string;
}

interface Pytest {
  code: number | null;
  output: string;
}

function pytest(
  python: string,
  dir: string,
  timeoutMs: number,
  args: string[],
  env: Record<string, string> = {},
) {
  return new Promise<Pytest>((resolve) => {
    execFile(
      python,
      ["-m", "pytest", ...args],
      {
        cwd: dir,
        // No __pycache__ in the repository; the interpreter's own output unbuffered.
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", PYTHONUNBUFFERED: "1", ...env },
        timeout: timeoutMs - 10_000,
        killSignal: "SIGKILL",
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : null) : 0;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

export interface PytestSuite {
  /** The directory holding the tests, conftest.py and pytest.ini. */
  dir: string;
  requirements: string;
  /** Prefix of the venv setup's log lines. */
  label: string;
  /** Per pytest test. */
  timeoutMs?: number;
}

/**
 * Makes the suite's venv, collects its tests, and returns what registers every pytest test under
 * a title; `env` is read when each one runs. `skip` names tests a backend cannot pass by design,
 * each with the reason reported.
 */
export async function loadPytest(
  o: PytestSuite,
): Promise<
  (title: string, env: () => Record<string, string>, skip?: Record<string, string>) => void
> {
  const timeoutMs = o.timeoutMs ?? PYTEST_TIMEOUT_MS;
  const python = await ensureVenv(
    (line) => process.stderr.write(`[${o.label}] ${line}\n`),
    o.requirements,
  );
  const collected = await pytest(python, o.dir, timeoutMs, ["--collect-only", "-q"]);
  const nodeIds = collected.output.split("\n").filter((line) => line.includes("::"));
  if (collected.code !== 0 || nodeIds.length === 0) {
    throw new Error(`pytest collected nothing (exit ${collected.code}):\n${collected.output}`);
  }
  return (title, env, skip = {}) =>
    describe(title, () => {
      for (const id of nodeIds) {
        test(id, { timeout: timeoutMs }, async (ctx) => {
          if (skip[id]) ctx.skip(skip[id]);
          const r = await pytest(python, o.dir, timeoutMs, ["-q", "--tb=short", id], env());
          const summary = r.output.trim().split("\n").at(-1) ?? "";
          if (r.code === 0 && /\b1 skipped\b/.test(summary)) {
            ctx.skip(/SKIPPED \[\d+\] [^:]+:\d+: (.*)/.exec(r.output)?.[1] ?? summary);
          }
          if (r.code !== 0 || !/\b1 passed\b/.test(summary)) {
            throw new Error(`pytest ${id} (exit ${r.code}):\n${r.output}`);
          }
        });
      }
    });
}

/** Registers every test of DeerFlow's suite under `title`; `urls` is read when each one runs. */
export async function agentSandboxSuite(
  title: string,
  urls: () => SuiteUrls,
  skip: Record<string, string> = {},
): Promise<void> {
  const register = await loadPytest({ dir: HERE, requirements: REQUIREMENTS, label: "deerflow" });
  register(title, () => ({ ...urls() }), skip);
}
