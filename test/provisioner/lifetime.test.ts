/**
 * The native API's lifetime route against the real cluster: POST /v1/sandboxes/:id/timeout
 * gives a sandbox a new end counted from now (the Sandbox's ttlSeconds becomes its age plus
 * that), shortens a longer idle timeout, and refuses bad input and other tenants' sandboxes.
 * Also: network "deny" on create lands on the Sandbox, and the view says what was asked.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type ProvisionerApi,
  type Stack,
  provisionerCall,
  startStack,
} from "../cluster/harness.ts";

let stack: Stack;
const KEY_A = "tenant-a-key-lifetime-0123456789";
const KEY_B = "tenant-b-key-lifetime-0123456789";

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "life",
    keys: [
      { key: KEY_A, tenant: "a" },
      { key: KEY_B, tenant: "b" },
    ],
  });
});

afterAll(async () => {
  await stack?.stop();
});

const api: ProvisionerApi = (...args) => provisionerCall(stack.prov.url, ...args);

async function sandboxSpec(id: string) {
  const s = (await stack.c.custom.getNamespacedCustomObject({
    group: "sandpit.dev",
    version: "v1alpha1",
    namespace: stack.ns,
    plural: "sandboxes",
    name: id,
  })) as {
    spec: {
      lifecycle?: { ttlSeconds?: number; idleTimeoutSeconds?: number };
      network?: { egress?: string };
    };
  };
  return s.spec;
}

describe("native API: lifetimes", () => {
  test(
    "timeout sets a new end from now; idle is kept within it",
    { timeout: 240_000 },
    async () => {
      const created = await api("POST", "/v1/sandboxes", KEY_A, {
        threadId: "t-life",
        ttlSeconds: 600,
        idleTimeoutSeconds: 600,
        network: "deny",
        labels: { purpose: "lifetime" },
        resources: { cpu: "250m", memory: "256Mi" },
        wait: false,
      });
      expect(created.status).toBe(201);
      const id = created.json.id as string;
      expect(created.json.labels).toMatchObject({ purpose: "lifetime" });
      expect(created.json.resources).toEqual({ cpu: "250m", memory: "256Mi" });
      expect(typeof created.json.createdAt).toBe("string");
      expect((await sandboxSpec(id)).network).toEqual({ egress: "Deny" });

      const before = Date.now();
      const set = await api("POST", `/v1/sandboxes/${id}/timeout`, KEY_A, { timeoutSeconds: 120 });
      expect(set.status).toBe(200);
      const end = Date.parse(set.json.expiresAt as string);
      expect(end).toBeGreaterThanOrEqual(before + 119_000);
      expect(end).toBeLessThanOrEqual(Date.now() + 122_000);
      const spec = await sandboxSpec(id);
      expect(spec.lifecycle!.ttlSeconds).toBeGreaterThanOrEqual(120);
      expect(spec.lifecycle!.ttlSeconds).toBeLessThan(600);
      // The idle timeout (600 s) was longer than the new lifetime: it is shortened to it.
      expect(spec.lifecycle!.idleTimeoutSeconds).toBe(spec.lifecycle!.ttlSeconds);

      // Bad input, unknown sandboxes and other tenants' are refused with the error envelope.
      for (const body of [{}, { timeoutSeconds: 10 }, { timeoutSeconds: "x" }, { other: 1 }]) {
        const bad = await api("POST", `/v1/sandboxes/${id}/timeout`, KEY_A, body);
        expect(bad.status).toBe(400);
        expect(bad.json.error.code).toBe("INVALID_ARGUMENT");
      }
      const tooLong = await api("POST", `/v1/sandboxes/${id}/timeout`, KEY_A, {
        timeoutSeconds: 30 * 24 * 3600,
      });
      expect(tooLong.status).toBe(400);
      expect(
        (await api("POST", "/v1/sandboxes/nope/timeout", KEY_A, { timeoutSeconds: 120 })).status,
      ).toBe(404);
      expect(
        (await api("POST", `/v1/sandboxes/${id}/timeout`, KEY_B, { timeoutSeconds: 120 })).status,
      ).toBe(404);
      const bogus = await api("POST", "/v1/sandboxes", KEY_A, { network: "internet" });
      expect(bogus.status).toBe(400);

      expect((await api("DELETE", `/v1/sandboxes/${id}`, KEY_A)).status).toBe(204);
    },
  );
});
