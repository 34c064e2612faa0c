/**
 * Both E2B conformance suites (TypeScript: conformance.ts; Python: conformance_test.py) against
 * the loopback E2B fake (test/fakes/e2b.ts), an independent server of the same protocol whose
 * sandboxes run real processes in bubblewrap: proof that the suites assert E2B's published
 * behaviour and not one implementation's. test/provisioner/e2b-sdk.test.ts runs the same suites
 * against Sandpit's own E2B-compatible API on the cluster.
 */
import { afterAll, beforeAll } from "vitest";
import { FakeE2B } from "../fakes/e2b.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { e2bConformance } from "./conformance.ts";
import { FAKE_TARGET, type E2BConnection } from "./targets.ts";

if (!(await bwrapUsable()))
  throw new Error("bubblewrap is needed (apt-get install bubblewrap): the E2B fake runs sandboxes in it");

const QUOTA = 2;
let fake: FakeE2B;
let connection: E2BConnection;

beforeAll(async () => {
  fake = new FakeE2B({ quotas: { [`e2b_${"9".repeat(40)}`]: QUOTA } });
  const url = await fake.start();
  connection = {
    apiKey: fake.apiKey,
    apiUrl: url,
    sandboxUrl: url,
    quota: { apiKey: `e2b_${"9".repeat(40)}`, maxSandboxes: QUOTA },
  };
});

afterAll(async () => {
  await fake?.close();
});

e2bConformance(FAKE_TARGET, () => connection);
