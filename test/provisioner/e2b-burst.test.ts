/**
 * The warm fast path driven by a client we did not write: the official `e2b` SDK against
 * Sandpit's E2B API, creating from a pool of warm pods the way an E2B program does (the default
 * template). What must hold whatever the provisioner and the operator do underneath:
 * - a burst of creates at once, larger than the pool, gives that many sandboxes, each on a pod
 *   of its own (its hostname, as code in it sees it), each reading back only what it wrote;
 * - `allowInternetAccess: false` from a pool whose template reaches the internet adopts a warm
 *   pod made for the internet and takes its reach away: code in it reaches nothing, while a
 *   sandbox of the burst reaches the test's "internet" (a public-range server, fake-internet.ts).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { Watch } from "@kubernetes/client-node";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { LABEL } from "@sandpit/operator/api";
import { type Stack, pools, sandboxes, startStack, waitFor } from "../cluster/harness.ts";
import { type FakeInternet, startFakeInternet } from "../security/fake-internet.ts";

const KEY = "e2b-burst-key-0123456789abcdefghij";
const POOL = "burst";
const WARM = 3;
/** More than the pool holds: some creates take a reserved pod, some adopt, some start cold. */
const BURST = 8;
const NONCE = `e2b-burst-${randomUUID().slice(0, 8)}`;
const RESERVED_POD = "sandpit.dev/reserved-pod";

let stack: Stack;
let internet: FakeInternet;
const made: Sandbox[] = [];

const opts = () => ({
  apiKey: KEY,
  apiUrl: `${stack.prov.url}/e2b`,
  sandboxUrl: `${stack.prov.url}/e2b`,
  timeoutMs: 600_000,
});

const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function create(o: { allowInternetAccess?: boolean } = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...opts(), ...o });
  made.push(sbx);
  return sbx;
}

/** The Sandbox object behind an E2B sandbox id (the E2B API's id is the Sandbox's name). */
const sandboxObject = (id: string) => sandboxes.get(stack.c, stack.ns, id);

/** What code in the sandbox gets from the test's internet: its body, or why it got nothing. */
async function reach(sbx: Sandbox, address: string): Promise<string> {
  const script = [
    "import urllib.request",
    "try:",
    `    print(urllib.request.urlopen("http://${address}:8080/", timeout=3).read().decode())`,
    "except Exception as e:",
    "    print('failed', type(e).__name__)",
  ].join("\n");
  await sbx.files.write("/home/user/reach.py", script);
  const r = await sbx.commands.run("python3 /home/user/reach.py", { timeoutMs: 30_000 });
  return r.stdout.trim();
}

beforeAll(async () => {
  internet = await startFakeInternet({ nonce: NONCE, ports: [8080] });
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "e2b-burst",
    keys: [{ key: KEY, tenant: "e2b-burst", maxSandboxes: 50 }],
    env: {
      SANDPIT_E2B_TOKEN_SECRET: randomBytes(32).toString("base64url"),
      SANDPIT_DEFAULT_POOL: POOL,
      SANDPIT_WARM_RESERVATION: "1",
    },
    beforeProvisioner: async (c, ns) => {
      await pools.create(c, ns, POOL, { warm: WARM, maxActive: 20, template: {} });
      await pools.waitWarm(c, ns, POOL, WARM);
    },
  });
  // The provisioner holds its reservation before the first create.
  await waitFor("a warm pod reserved by the provisioner", 60_000, async () => {
    const { items } = await stack.c.core.listNamespacedPod({
      namespace: stack.ns,
      labelSelector: `${LABEL.pool}=${POOL},${LABEL.warm}=true`,
    });
    return items.some((p) => p.metadata?.annotations?.["sandpit.dev/reserved-by"]);
  });
}, 300_000);

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => false)));
  await stack?.stop();
  await internet?.stop();
}, 120_000);

describe("the official E2B SDK on a warm pool", () => {
  test(
    `${BURST} creates at once: ${BURST} sandboxes, each on a pod of its own, each reading only what it wrote`,
    { timeout: 360_000 },
    async () => {
      const burst = await Promise.all(Array.from({ length: BURST }, () => create()));
      const ids = burst.map((s) => s.sandboxId);
      expect(new Set(ids).size).toBe(BURST);
      const seen = await Promise.all(
        burst.map(async (sbx) => {
          await sbx.files.write("/home/user/who", sbx.sandboxId);
          const r = await sbx.commands.run("cat /home/user/who; echo; hostname");
          const [who, host] = r.stdout.trim().split("\n");
          return { id: sbx.sandboxId, who, host: host!.trim() };
        }),
      );
      for (const s of seen) expect(s.who, s.id).toBe(s.id);
      // Each on a pod of its own, as code in it sees it and as the operator reports it.
      expect(new Set(seen.map((s) => s.host)).size).toBe(BURST);
      // The operator completes a fast-path create after its answer: until then no pod is named.
      let objects: Awaited<ReturnType<typeof sandboxObject>>[] = [];
      await waitFor("every Sandbox naming its pod", 120_000, async () => {
        objects = await Promise.all(ids.map(sandboxObject));
        return objects.every((o) => o.status?.podName);
      });
      const podNames = objects.map((o) => o.status?.podName);
      expect(new Set(podNames).size).toBe(BURST);
      expect(seen.map((s) => s.host).sort()).toEqual([...podNames].sort());
      // The provisioner's fast path answered some of them from the pod it held.
      expect(objects.filter((o) => o.metadata.annotations?.[RESERVED_POD]).length).toBeGreaterThan(
        0,
      );
    },
  );
  test(
    "allowInternetAccess: false adopts a warm pod made for the internet, and reaches nothing",
    { timeout: 240_000 },
    async () => {
      // Warm pods free for the operator's adoption (the pool refills after the burst).
      await pools.waitWarm(stack.c, stack.ns, POOL, WARM);
      // Every version of every pod from now on: the adopted pod must never belong to the
      // sandbox while it still carries the template's network key, not even for a moment.
      const versions: { sandbox?: string; network?: string }[] = [];
      const watch = await new Watch(stack.c.kc).watch(
        `/api/v1/namespaces/${stack.ns}/pods`,
        {},
        (_type: string, pod: { metadata?: { labels?: Record<string, string> } }) => {
          const labels = pod.metadata?.labels ?? {};
          versions.push({ sandbox: labels[LABEL.sandbox], network: labels[LABEL.network] });
        },
        () => undefined,
      );
      let closed: Sandbox;
      try {
        closed = await create({ allowInternetAccess: false });
        await sleepMs(2_000); // the events of the claim, if any are still on the way
      } finally {
        watch.abort();
      }
      const object = await sandboxObject(closed.sandboxId);
      // A warm pod of the pool (not one made for it): the operator's adoption, which gives
      // the pod the sandbox's network in the same write that gives it the pod.
      expect(object.status?.podName).toBeDefined();
      expect(object.status?.podName).not.toBe(object.metadata.name);
      const pod = await stack.c.core.readNamespacedPod({
        name: object.status!.podName!,
        namespace: stack.ns,
      });
      const key = pod.metadata!.labels![LABEL.network]!;
      const template = versions.find((v) => !v.sandbox && v.network)?.network;
      expect(template, "a warm pod's network key").toBeDefined();
      expect(key).not.toBe(template);
      expect(versions.filter((v) => v.sandbox === object.metadata.name)).not.toContainEqual({
        sandbox: object.metadata.name,
        network: template,
      });
      const policies = await stack.c.net.listNamespacedNetworkPolicy({ namespace: stack.ns });
      // Deny: no egress policy selects it; the namespace's isolation policy does.
      expect(
        policies.items.filter((p) => p.spec?.podSelector?.matchLabels?.[LABEL.network] === key),
      ).toEqual([]);
      expect(policies.items.map((p) => p.metadata!.name)).toContain("sandpit-isolation");

      expect(await reach(closed, internet.addresses[0]!)).toMatch(/^failed /);
      // The control: a sandbox of the same pool with the template's network reaches it.
      const open = await create();
      expect(await reach(open, internet.addresses[0]!)).toBe(NONCE);
    },
  );
});
