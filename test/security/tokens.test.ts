/**
 * Attack: code in a sandbox reads every environment it can see (its own, PID 1's, every
 * process's /proc/<pid>/environ) looking for a token. Before tokens were given to pods as their
 * SHA-256 only, PID 1's environment held the sandbox's own token, and in a sandbox adopted from
 * a pool the pool's warm token, which opened every warm pod not yet adopted. Now neither is
 * anywhere in the sandbox (nor the warm pod's own token, warm tokens being per pod since), and
 * the digest that is there opens nothing.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type ProvisionerApi,
  type Stack,
  pools,
  provisionerCall,
  startStack,
  waitFor,
  warmTokenOfPod,
} from "../cluster/harness.ts";
import { READ_EVERY_ENVIRONMENT } from "./read-environments.ts";

const KEY = "tokens-attack-key-0123456789abcdef";
let stack: Stack;
const api: ProvisionerApi = (...args) => provisionerCall(stack.prov.url, ...args);

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "sec-tok",
    keys: [{ key: KEY, tenant: "attacker", maxSandboxes: 10 }],
  });
  // Three warm pods: the first create naming the pool has the provisioner reserve two at once
  // (SANDPIT_WARM_RESERVATION), and the create itself is handed the third.
  await pools.create(stack.c, stack.ns, "warm", { maxActive: 5, warm: 3, template: {} });
  await waitFor("the warm pool filled", 180_000, async () => {
    const p = await pools.get(stack.c, stack.ns, "warm");
    return (p.status?.warmReady ?? 0) >= 3;
  });
}, 240_000);

afterAll(async () => {
  await stack?.stop();
});

async function secretValue(name: string, key: string): Promise<string> {
  const s = await stack.c.core.readNamespacedSecret({ name, namespace: stack.ns });
  return Buffer.from(s.data![key]!, "base64").toString();
}

describe("tokens in a sandbox's reach", () => {
  test.each([
    ["adopted from a warm pool", { pool: "warm" }],
    ["made on its own", {}],
  ])("a sandbox %s holds no token in any environment", { timeout: 180_000 }, async (_, body) => {
    const made = await api("POST", "/v1/sandboxes", KEY, { language: "python", ...body });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = made.json.id as string;
    const run = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEY, {
      language: "python",
      code: READ_EVERY_ENVIRONMENT,
    });
    expect(run.status, JSON.stringify(run.json)).toBe(200);
    const seen = run.json.stdout as string;
    // The attack ran: PID 1's environment was read (its PATH is there).
    expect(seen).toMatch(/PATH=/);
    const own = await waitFor("the sandbox's token Secret", 30_000, () =>
      secretValue(`${id}-token`, "token").catch(() => undefined),
    );
    expect(seen).not.toContain(own);
    const sbx = await waitFor("the sandbox's status", 30_000, async () => {
      const s = (await stack.c.custom.getNamespacedCustomObject({
        group: "sandpit.dev",
        version: "v1alpha1",
        namespace: stack.ns,
        plural: "sandboxes",
        name: id,
      })) as { status?: { endpoint?: string; podName?: string } };
      return s.status?.endpoint && s.status.podName ? s : undefined;
    });
    if ("pool" in body) {
      // Adopted: the warm token its pod was made with is nowhere either.
      expect(sbx.status!.podName).not.toBe(id);
      const pod = await stack.c.core.readNamespacedPod({
        name: sbx.status!.podName!,
        namespace: stack.ns,
      });
      expect(seen).not.toContain(await warmTokenOfPod(stack.c, stack.ns, pod));
    }
    // What is there, the digest, opens nothing: sandboxd wants the token itself.
    const digest = /SANDBOXD_TOKEN_SHA256=([0-9a-f]{64})/.exec(seen)?.[1];
    expect(digest, "the digest is in the environment, as the token was").toBeDefined();
    const res = await fetch(`http://${sbx.status!.endpoint}/v1/files/stat?path=.`, {
      headers: { authorization: `Bearer ${digest}` },
    });
    expect(res.status).toBe(401);
    expect((await api("DELETE", `/v1/sandboxes/${id}`, KEY)).status).toBe(204);
  });
});
