/**
 * The pytest suite beside this file (DeerFlow's pinned `agent-sandbox` client, unchanged) as
 * vitest tests: collected when a test file imports this module (so the count is pytest's own),
 * and each pytest test run in its own pytest process with the sandboxes' URLs in its
 * environment. A failure carries pytest's report; a skip carries pytest's reason.
 *
 * Two files run it: test/deerflow/agent-sandbox.test.ts against sandbox_urls from the
 * provisioner's DeerFlow API on the cluster, and test/docker/deerflow-local.test.ts against the
 * sandbox image started the way DeerFlow's own local container backend starts its image.
 */
import { execFile } from "node:child_process";
import { describe, test } from "vitest";
import { ensureVenv } from "./python.ts";

const HERE = new URL(".", import.meta.url).pathname;
/** Per pytest test: the 20 MiB round trip and a venv inside the sandbox take the longest. */
export const PYTEST_TIMEOUT_MS = 240_000;

/** The environment variables the suite's fixtures read (conftest.py). */
export interface SuiteUrls {
  SANDPIT_SANDBOX_URL: string;
  SANDPIT_OTHER_SANDBOX_URL: string;
}

interface Pytest {
  code: number | null;
  output: string;
}

function pytest(python: string, args: string[], env: Record<string, string> = {}) {
  return new Promise<Pytest>((resolve) => {
    execFile(
      python,
      ["-m", "pytest", ...args],
      {
        cwd: HERE,
        // No __pycache__ in the repository; the interpreter's own output unbuffered.
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", PYTHONUNBUFFERED: "1", ...env },
        timeout: PYTEST_TIMEOUT_MS - 10_000,
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

const python = await ensureVenv((line) => process.stderr.write(`[deerflow] ${line}\n`));
const collected = await pytest(python, ["--collect-only", "-q"]);
const nodeIds = collected.output.split("\n").filter((line) => line.includes("::"));
if (collected.code !== 0 || nodeIds.length === 0) {
  throw new Error(`pytest collected nothing (exit ${collected.code}):\n${collected.output}`);
}

/**
 * Registers every pytest test under `title`; `urls` is read when each one runs. `skip` names
 * tests a backend cannot pass by design, each with the reason reported.
 */
export function agentSandboxSuite(
  title: string,
  urls: () => SuiteUrls,
  skip: Record<string, string> = {},
): void {
  describe(title, () => {
    for (const id of nodeIds) {
      test(id, { timeout: PYTEST_TIMEOUT_MS }, async (ctx) => {
        if (skip[id]) ctx.skip(skip[id]);
        const r = await pytest(python, ["-q", "--tb=short", id], { ...urls() });
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
