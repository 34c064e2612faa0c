/**
 * `sandpit serve --backend docker --warm 1`: serve's creates carry labels (its records) and a
 * lifetime, and still claim a warm container (the Docker provider keeps a claim's labels on the
 * host); a SIGKILLed serve restarted on the same state finds the claimed sandbox by them.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, inject, test } from "vitest";
import { KEYS, type ServeProcess, call, startServe, removeState } from "./harness.ts";

const run = promisify(execFile);
const docker = (...args: string[]) => run("docker", args).then((r) => r.stdout.trim());
const names = async (...filter: string[]) =>
  (await docker("ps", "-a", ...filter.flatMap((f) => ["--filter", f]), "--format", "{{.Names}}"))
    .split("\n")
    .filter(Boolean);
const WARM = "name=^sandpit-warm-";

let stateDir: string;
let serve: ServeProcess;
let warmBefore: string[];
const env = () => ({ DOCKER_HOST: `unix://${inject("dockerSocket")}` });
const start = (warm: string) =>
  startServe(
    [
      "--backend",
      "docker",
      "--image",
      inject("sandboxImage"),
      "--warm",
      warm,
      "--state-dir",
      stateDir,
    ],
    { ...env(), SANDPIT_API_KEYS: JSON.stringify([{ key: KEYS.a, tenant: "a", maxSandboxes: 5 }]) },
  );

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-warm-"));
  warmBefore = await names(WARM);
  serve = await start("1");
});

afterAll(async () => {
  await serve?.stop();
  // The blank containers this test's serve started (others' stay).
  const made = (await names(WARM)).filter((n) => !warmBefore.includes(n));
  if (made.length) await docker("rm", "-f", "-v", ...made);
  if (stateDir) await removeState(stateDir);
});

test("a create claims the warm container, labels and lifetime kept across a SIGKILL", async () => {
  const api = (method: string, path: string, body?: unknown) =>
    call(serve.url, method, path, { bearer: KEYS.a }, body);
  let warm: string[] = [];
  for (let i = 0; i < 300 && warm.length === 0; i++) {
    warm = (await names(WARM, "status=running")).filter((n) => !warmBefore.includes(n));
    if (!warm.length) await new Promise((r) => setTimeout(r, 200));
  }
  expect(warm.length).toBeGreaterThan(0);
  const made = await api("POST", "/v1/sandboxes", {
    threadId: "t-warm",
    labels: { team: "blue" },
    ttlSeconds: 3600,
  });
  expect(made.status, JSON.stringify(made.json)).toBe(201);
  const id = made.json.id as string;
  const state = (JSON.parse(await readFile(join(stateDir, "serve.json"), "utf8")) as { id: string })
    .id;
  // The Docker provider's container of serve's sandbox (its name is of serve's state and the
  // sandbox's name) was started as a blank warm container: the claim kept its labels elsewhere.
  const container = `sandpit-${createHash("sha256").update(`${state}:${id}`).digest("hex").slice(0, 16)}`;
  expect(
    await docker("inspect", "-f", '{{index .Config.Labels "sandpit.dev/warm"}}', container),
  ).toBe("true");
  expect(await names(`label=serve.sandpit.dev/state=${state}`)).toEqual([]);

  await serve.kill();
  serve = await start("0");
  const again = await api("GET", `/v1/sandboxes/${id}`);
  expect(again.status).toBe(200);
  expect(again.json.labels).toMatchObject({ team: "blue" });
  expect(Math.abs(Date.parse(again.json.expiresAt) - Date.parse(made.json.expiresAt))).toBeLessThan(
    2_000,
  );
  const out = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, {
    language: "python",
    code: "print('warm')",
  });
  expect(out.json.stdout).toBe("warm\n");
  expect((await api("DELETE", `/v1/sandboxes/${id}`)).status).toBe(204);
}, 180_000);
