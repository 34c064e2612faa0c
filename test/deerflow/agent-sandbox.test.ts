/**
 * DeerFlow's own sandbox client, unchanged: the pytest suite beside this file drives the
 * `agent-sandbox` Python client DeerFlow pins (requirements.txt) against sandbox_urls that the
 * provisioner's DeerFlow API hands out, on the real cluster with the real operator.
 * Every pytest test is a test here (test/deerflow/pytest-suite.ts).
 */
import { createHash, randomUUID } from "node:crypto";
import { afterAll, beforeAll, expect, inject } from "vitest";
import { type Stack, provisionerCall, startStack, waitFor } from "../cluster/harness.ts";
import { type SuiteUrls, agentSandboxSuite } from "./pytest-suite.ts";

const KEY = "deerflow-py-key-0123456789abcdef";

let stack: Stack;
let urls: SuiteUrls;

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
  const [one, other] = await Promise.all([create(randomUUID()), create(randomUUID())]);
  urls = { SANDPIT_SANDBOX_URL: one, SANDPIT_OTHER_SANDBOX_URL: other };
});

afterAll(async () => {
  await stack?.stop();
});

await agentSandboxSuite("agent-sandbox (DeerFlow's pin) against sandbox_url", () => urls);
