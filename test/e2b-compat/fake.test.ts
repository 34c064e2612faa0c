/**
 * Both E2B conformance suites (TypeScript: conformance.ts; Python: conformance_test.py, one
 * pytest process per test) against the loopback E2B fake (test/fakes/e2b.ts), an independent
 * server of the same protocol whose sandboxes run real processes in bubblewrap: proof that the
 * suites assert E2B's published behaviour and not one implementation's.
 * test/provisioner/e2b-sdk.test.ts runs the same suites against Sandpit's own E2B-compatible API.
 */
import { afterAll, beforeAll } from "vitest";
import { loadPytest } from "../deerflow/pytest-suite.ts";
import { FakeE2B } from "../fakes/e2b.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { e2bConformance } from "./conformance.ts";
import { type E2BConnection, FAKE_TARGET, targetEnv } from "./targets.ts";
import { PYTEST_SUITE } from "./pytest.ts";

if (!(await bwrapUsable()))
  throw new Error("bubblewrap is needed (apt-get install bubblewrap): the E2B fake runs in it");

/** A second key whose tenant may hold this many sandboxes at once. */
const QUOTA_KEY = `e2b_${"9".repeat(40)}`;
const QUOTA = 2;
let fake: FakeE2B;
let connection: E2BConnection;

beforeAll(async () => {
  fake = new FakeE2B({ quotas: { [QUOTA_KEY]: QUOTA } });
  const url = await fake.start();
  connection = {
    apiKey: fake.apiKey,
    apiUrl: url,
    sandboxUrl: url,
    quota: { apiKey: QUOTA_KEY, maxSandboxes: QUOTA },
  };
});

afterAll(async () => {
  await fake?.close();
});

e2bConformance(FAKE_TARGET, () => connection);

(await loadPytest(PYTEST_SUITE))(`E2B conformance (Python SDK) against ${FAKE_TARGET.name}`, () =>
  targetEnv(FAKE_TARGET, connection),
);
