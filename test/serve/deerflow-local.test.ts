/**
 * DeerFlow's own sandbox client (the pinned `agent-sandbox` pytest suite, test/deerflow/) against
 * sandbox_urls that `sandpit serve --backend local` hands out through its DeerFlow API.
 */
import { createHash, randomUUID } from "node:crypto";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import { type SuiteUrls, agentSandboxSuite } from "../deerflow/pytest-suite.ts";
import { KEYS, type ServeProcess, call, startServe, removeState } from "./harness.ts";

let stateDir: string;
let serve: ServeProcess;
let urls: SuiteUrls;

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-deerflow-"));
  serve = await startServe(["--backend", "local", "--state-dir", stateDir]);
  // DeerFlow's create payload (RemoteSandboxBackend) for two threads of one user.
  const create = async (thread: string) => {
    const r = await call(
      serve.url,
      "POST",
      "/api/sandboxes",
      { apiKey: KEYS.deerflow },
      {
        sandbox_id: createHash("sha256").update(`default:${thread}`).digest("hex").slice(0, 16),
        thread_id: thread,
        user_id: "default",
      },
    );
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    return r.json.sandbox_url as string;
  };
  const [one, other] = await Promise.all([create(randomUUID()), create(randomUUID())]);
  urls = { SANDPIT_SANDBOX_URL: one, SANDPIT_OTHER_SANDBOX_URL: other };
});

afterAll(async () => {
  await serve?.stop();
  if (stateDir) await removeState(stateDir);
});

await agentSandboxSuite(
  "agent-sandbox (DeerFlow's pin) against sandpit serve (local)",
  () => urls,
  {
    "test_agent_sandbox.py::test_write_outside_user_data":
      "the local backend is no container: its file routes stay inside /mnt/user-data, and /tmp is the host's",
  },
);
