/**
 * The Python E2B conformance suite (test/e2b-compat: the official Python SDKs in pytest) against
 * `sandpit serve --backend docker`, on its E2B API out of the box, as test/serve/e2b-local.test.ts
 * runs the JS suite on local; the engine and image are the docker project's global setup's.
 */
import { mkdtemp, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, inject } from "vitest";
import { loadPytest } from "../deerflow/pytest-suite.ts";
import { PYTEST_SUITE } from "../e2b-compat/pytest.ts";
import { type E2BConnection, SERVE_TARGETS, targetEnv } from "../e2b-compat/targets.ts";
import { type ServeProcess, startServe, removeState } from "./harness.ts";

const KEY = "e2b-serve-docker-key-0123456789abcdef";
const QUOTA_KEY = "e2b-serve-quota-0123456789abcdef";
const QUOTA = 1;

const TARGET = SERVE_TARGETS.docker;

let stateDir: string;
let serve: ServeProcess;
let connection: E2BConnection;

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-e2b-docker-"));
  // No warm pool: its blank containers belong to no serve state, so nothing would remove them.
  const args = ["--backend", "docker", "--image", inject("sandboxImage"), "--warm", "0"];
  serve = await startServe([...args, "--state-dir", stateDir], {
    DOCKER_HOST: `unix://${inject("dockerSocket")}`,
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

(await loadPytest(PYTEST_SUITE))(`E2B conformance (Python SDK) against ${TARGET.name}`, () =>
  targetEnv(TARGET, connection),
);
