/**
 * DeerFlow's own sandbox client, unchanged: the pytest suite beside this file drives the
 * `agent-sandbox` Python client DeerFlow pins (requirements.txt) against sandbox_urls that the
 * provisioner's DeerFlow API hands out, on the real cluster with the real operator.
 *
 * Every pytest test is a test here: the suite is collected when this file is (so the count is
 * pytest's own), and each one runs in its own pytest process with the sandboxes' URLs in its
 * environment. A failure carries pytest's report; a skip carries pytest's reason.
 */
import { execFile } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { type Stack, provisionerCall, startStack, waitFor } from "../cluster/harness.ts";
import { ensureVenv } from "./python.ts";

const HERE = new URL(".", import.meta.url).pathname;
const KEY = "deerflow-py-key-0123456789abcdef";
/** Per pytest test: the 20 MiB round trip and a venv inside the sandbox take the longest. */
const TEST_TIMEOUT_MS = 240_000;

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
        timeout: TEST_TIMEOUT_MS - 10_000,
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

let stack: Stack;
const urls: Record<string, string> = {};

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "deerflow-py",
    keys: [{ key: KEY, tenant: "deerflow", maxSandboxes: 10 }],
  });
  // DeerFlow's create payload (RemoteSandboxBackend) for two threads of one user, with its
  // sandbox id: the start of sha256("<user>:<thread>").
  const create = async (thread: string) => {
    const r = await provisionerCall(
      stack.prov.url,
      "POST",
      "/api/sandboxes",
      undefined,
      {
        sandbox_id: createHash("sha256").update(`default:${thread}`).digest("hex").slice(0, 16),
        thread_id: thread,
        user_id: "default",
        include_legacy_skills: false,
        provision_lark_cli_runtime: false,
        provision_lark_cli_broker: false,
      },
      { "X-API-Key": KEY },
    );
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    const url = r.json.sandbox_url as string;
    // DeerFlow's readiness wait: GET /v1/sandbox until it answers 200.
    await waitFor(`${url}/v1/sandbox`, 120_000, async () => (await fetch(`${url}/v1/sandbox`)).ok);
    return url;
  };
  [urls.SANDPIT_SANDBOX_URL, urls.SANDPIT_OTHER_SANDBOX_URL] = await Promise.all([
    create(randomUUID()),
    create(randomUUID()),
  ]);
});

afterAll(async () => {
  await stack?.stop();
});

describe("agent-sandbox (DeerFlow's pin) against sandbox_url", () => {
  for (const id of nodeIds) {
    test(id, { timeout: TEST_TIMEOUT_MS }, async (ctx) => {
      const r = await pytest(python, ["-q", "--tb=short", id], urls);
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
