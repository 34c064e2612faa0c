/**
 * Issue 18, rows 1 and 9, attacked on the real cluster with the real operator and provisioner:
 * limits are the platform's policy, never the caller's wish (docs/security.md#resource-limits).
 *  - Row 1: a zero limit (which Kubernetes reads as none: a BestEffort pod) and a node's worth
 *    (100Gi, 64 CPUs, 10Ti) are refused with a 400 naming the bound, and nothing is made; a
 *    pool's and an API key's ceilings are held too.
 *  - Row 9: a create naming a pool that does not exist is a 404 at once, and nothing is made.
 *  - A Sandbox applied directly (kubectl) with a zero limit is refused by the API server (CEL);
 *    one outside its pool's bounds is Failed with reason ResourcesOutOfBounds and never started.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type ProvisionerApi,
  type Stack,
  pools,
  provisionerCall,
  sandboxes,
  startStack,
  waitForPhase,
} from "../cluster/harness.ts";

const KEY = "limits-key-0123456789abcdef01";
const SMALL = "limits-small-0123456789abcdef";

let stack: Stack;
let c: Clients;
let ns: string;
let api: ProvisionerApi;

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "sec-limits",
    keys: [
      { key: KEY, tenant: "a" },
      { key: SMALL, tenant: "small", maxResources: { memory: "256Mi" } },
    ],
  });
  ({ c, ns } = stack);
  api = (...args) => provisionerCall(stack.prov.url, ...args);
  await pools.create(c, ns, "bounded", {
    maxActive: 5,
    template: {},
    resourceBounds: { min: { memory: "128Mi" }, max: { memory: "512Mi", cpu: "1" } },
  });
});
afterAll(async () => {
  await stack?.stop();
});

/** Sandboxes in the namespace: a refused create must leave none. */
const names = async () => (await sandboxes.list(c, ns)).map((s) => s.metadata.name);

/** The API server's refusal of `create`, as code and message. */
async function refusal(create: Promise<unknown>): Promise<{ code?: number; message: string }> {
  const err = await create.then(
    () => undefined,
    (e: { code?: number; body?: string }) => e,
  );
  expect(err, "the API server accepted it").toBeDefined();
  return {
    ...(err!.code !== undefined ? { code: err!.code } : {}),
    message: (JSON.parse(String(err!.body)) as { message: string }).message,
  };
}

describe("the provisioner holds every create to its bounds (row 1)", () => {
  test("zero limits are a 400, not a pod without limits", async () => {
    for (const resources of [
      { memory: "0", cpu: "0" },
      { cpu: "0m" },
      { ephemeralStorage: "0Gi" },
    ]) {
      const r = await api("POST", "/v1/sandboxes", KEY, { resources, wait: false });
      expect(r.status, JSON.stringify(resources)).toBe(400);
      expect(r.json.error.code).toBe("INVALID_ARGUMENT");
      expect(r.json.error.message).toMatch(/above zero/);
    }
    expect(await names()).toEqual([]);
  });

  test("a node's worth is a 400 naming each bound broken", async () => {
    const r = await api("POST", "/v1/sandboxes", KEY, {
      resources: { memory: "100Gi", cpu: "64", ephemeralStorage: "10Ti" },
    });
    expect(r.status).toBe(400);
    expect(r.json.error.code).toBe("INVALID_ARGUMENT");
    expect(r.json.error.message).toBe(
      "resources: cpu 64 is above the platform's maximum 4; memory 100Gi is above the platform's maximum 4Gi; ephemeralStorage 10Ti is above the platform's maximum 8Gi",
    );
    expect(await names()).toEqual([]);
  });

  test("a pool's bounds and an API key's ceiling hold too", async () => {
    const above = await api("POST", "/v1/sandboxes", KEY, {
      pool: "bounded",
      resources: { memory: "1Gi" },
    });
    expect(above.status).toBe(400);
    expect(above.json.error.message).toBe(
      "resources: memory 1Gi is above this pool's maximum 512Mi",
    );
    const below = await api("POST", "/v1/sandboxes", KEY, {
      pool: "bounded",
      resources: { memory: "64Mi" },
    });
    expect(below.json.error.message).toBe(
      "resources: memory 64Mi is below this pool's minimum 128Mi",
    );
    const key = await api("POST", "/v1/sandboxes", SMALL, { resources: { memory: "512Mi" } });
    expect(key.status).toBe(400);
    expect(key.json.error.message).toBe(
      "resources: memory 512Mi is above this API key's maximum 256Mi",
    );
    expect(await names()).toEqual([]);
    // Within them, the create goes through.
    const ok = await api("POST", "/v1/sandboxes", KEY, {
      pool: "bounded",
      resources: { memory: "256Mi" },
      wait: false,
    });
    expect(ok.status, JSON.stringify(ok.json)).toBe(201);
    await api("DELETE", `/v1/sandboxes/${ok.json.id as string}`, KEY);
  });
});

describe("an unknown pool (row 9)", () => {
  test("is a 404 at once, and nothing is made", async () => {
    const started = Date.now();
    const r = await api("POST", "/v1/sandboxes", KEY, { pool: "no-such-pool", wait: true });
    expect(r.status).toBe(404);
    expect(r.json.error).toEqual({ code: "NOT_FOUND", message: 'no SandboxPool "no-such-pool"' });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await sandboxes.list(c, ns)).filter((s) => s.spec.poolRef === "no-such-pool")).toEqual(
      [],
    );
  });
});

describe("a Sandbox applied directly", () => {
  test.each([
    ["memory 0", { resources: { memory: "0" } }, /Memory limit is above zero/],
    ["cpu 0m", { resources: { cpu: "0m" } }, /CPU limit is above zero/],
    ["ephemeral storage 0.0Gi", { resources: { ephemeralStorage: "0.0Gi" } }, /above zero/],
    ["a volume of 0", { storage: { size: "0Mi" } }, /above zero/],
  ])("with %s is refused by the API server (CEL)", async (_what, spec, message) => {
    const r = await refusal(
      sandboxes.create(c, ns, `zero-${Math.random().toString(36).slice(2, 7)}`, spec),
    );
    expect(r.code).toBe(422);
    expect(r.message).toMatch(message);
  });

  test("a pool's zero bound is refused by the API server too", async () => {
    const r = await refusal(
      pools.create(c, ns, "zero-bound", {
        maxActive: 1,
        template: {},
        resourceBounds: { max: { memory: "0" } },
      }),
    );
    expect(r.code).toBe(422);
    expect(r.message).toMatch(/above zero/);
  });

  test("above its pool's maximum, or the platform's, it is Failed with the reason and never started", async () => {
    await sandboxes.create(c, ns, "too-big", {
      poolRef: "bounded",
      resources: { memory: "1Gi" },
    });
    await sandboxes.create(c, ns, "no-pool-too-big", { resources: { cpu: "64" } });
    for (const [name, message] of [
      ["too-big", "memory 1Gi is above this pool's maximum 512Mi"],
      ["no-pool-too-big", "cpu 64 is above the platform's maximum 4"],
    ]) {
      const failed = await waitForPhase(c, ns, name!, "Failed", 30_000);
      const ready = failed.status?.conditions?.find((x) => x.type === "Ready");
      expect(ready?.reason).toBe("ResourcesOutOfBounds");
      expect(ready?.message).toBe(message);
      const pods = await c.core.listNamespacedPod({
        namespace: ns,
        labelSelector: `sandpit.dev/sandbox=${name}`,
      });
      expect(pods.items).toEqual([]);
    }
  });
});
