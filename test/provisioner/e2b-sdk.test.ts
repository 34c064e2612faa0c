/**
 * Both E2B conformance suites (test/e2b-compat: the official JS SDKs in vitest, the official
 * Python SDKs in pytest) against Sandpit's E2B-compatible API on the provisioner, with the real
 * operator and sandboxes on the cluster: `E2B_API_URL` and `E2B_SANDBOX_URL` both
 * `<provisioner>/e2b`, the key a Sandpit API key. A second key, whose tenant may hold one
 * sandbox, is the quota the suites exhaust. Nothing here knows Sandpit's side beyond that: the
 * same suites pass against the loopback fake (test/e2b-compat/fake.test.ts).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, inject } from "vitest";
import { type Stack, startStack } from "../cluster/harness.ts";
import { loadPytest } from "../deerflow/pytest-suite.ts";
import { e2bConformance } from "../e2b-compat/conformance.ts";
import { PYTEST_SUITE } from "../e2b-compat/pytest.ts";
import { type E2BConnection, SANDPIT_TARGET, targetEnv } from "../e2b-compat/targets.ts";

const KEY = "e2b-conformance-key-0123456789abcdef";
const QUOTA_KEY = "e2b-quota-key-0123456789abcdefghij";
const QUOTA = 1;

let stack: Stack;
let connection: E2BConnection;

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "e2b-sdk",
    keys: [
      { key: KEY, tenant: "e2b-conformance", maxSandboxes: 50 },
      { key: QUOTA_KEY, tenant: "e2b-quota", maxSandboxes: QUOTA },
    ],
    // The E2B API derives each sandbox's envd access token from this secret.
    env: { SANDPIT_E2B_TOKEN_SECRET: randomBytes(32).toString("base64url") },
  });
  const e2b = `${stack.prov.url}/e2b`;
  connection = {
    apiKey: KEY,
    apiUrl: e2b,
    sandboxUrl: e2b,
    quota: { apiKey: QUOTA_KEY, maxSandboxes: QUOTA },
  };
});

afterAll(async () => {
  await stack?.stop();
});

e2bConformance(SANDPIT_TARGET, () => connection);

(await loadPytest(PYTEST_SUITE))(
  `E2B conformance (Python SDK) against ${SANDPIT_TARGET.name}`,
  () => targetEnv(SANDPIT_TARGET, connection),
);
