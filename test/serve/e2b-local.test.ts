/**
 * The JS E2B conformance suite (test/e2b-compat: the official JS SDKs in vitest) against
 * `sandpit serve --backend local`, on its E2B API out of the box: no token secret given (serve
 * keeps its own in the state directory), `E2B_API_URL` and `E2B_SANDBOX_URL` both the
 * SANDPIT_E2B_URL it prints, sandboxd reached over its unix socket. The Python suite runs against
 * serve on Docker (test/serve/docker-e2b.test.ts): the E2B API is one code path over either
 * backend, and both suites on both backends would add a quarter of an hour to every test run.
 */
import { mkdtemp, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import { e2bConformance } from "../e2b-compat/conformance.ts";
import { type E2BConnection, SERVE_TARGETS } from "../e2b-compat/targets.ts";
import { type ServeProcess, startServe, removeState } from "./harness.ts";

const KEY = "e2b-serve-key-0123456789abcdef";
const QUOTA_KEY = "e2b-serve-quota-0123456789abcdef";
const QUOTA = 1;

const TARGET = SERVE_TARGETS.local;

let stateDir: string;
let serve: ServeProcess;
let connection: E2BConnection;

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-e2b-"));
  serve = await startServe(["--backend", "local", "--state-dir", stateDir], {
    SANDPIT_API_KEYS: JSON.stringify([
      { key: KEY, tenant: "e2b", maxSandboxes: 50 },
      { key: QUOTA_KEY, tenant: "e2b-quota", maxSandboxes: QUOTA },
    ]),
    // Package installs (pandas, matplotlib) on a cold pip cache take minutes.
    SANDPIT_READY_TIMEOUT_MS: "600000",
  });
  expect(serve.e2bUrl).toBe(`${serve.url}/e2b`);
  // The token secret serve made is private to its user.
  expect((await stat(join(stateDir, "e2b-secret"))).mode & 0o777).toBe(0o600);
  connection = {
    apiKey: KEY,
    apiUrl: serve.e2bUrl,
    sandboxUrl: serve.e2bUrl,
    quota: { apiKey: QUOTA_KEY, maxSandboxes: QUOTA },
  };
});

afterAll(async () => {
  await serve?.stop();
  if (stateDir) await removeState(stateDir);
});

e2bConformance(TARGET, () => connection);
