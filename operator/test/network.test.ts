/**
 * The shared network policies of a namespace's sandboxes: what the isolation policy and each
 * egress policy say, which pods share a network key, the writes a sandbox's start makes for them
 * (none once they exist), and when an unused egress policy is collected.
 */
import { describe, expect, it } from "vitest";
import { ANNOTATION, LABEL, SandboxSpec } from "../src/api/index.ts";
import { readConfig } from "../src/config.ts";
import type { KObject } from "../src/kube/rest.ts";
import { ensureNetwork } from "../src/network/policies.ts";
import { UNUSED_GRACE_MS, reconcileEgressPolicy } from "../src/network/reconciler.ts";
import { isolate } from "../src/sandbox/children.ts";
import { BLOCKED_CIDRS } from "../src/workload/egress.ts";
import {
  ISOLATION_POLICY,
  egressPolicy,
  egressPolicyName,
  isolationPolicy,
  networkKey,
} from "../src/workload/network.ts";
import { effectiveSpec } from "../src/workload/spec.ts";
import { fakeCtx } from "./fake-ctx.ts";

const cfg = readConfig({
  SANDPIT_SYSTEM_NAMESPACE: "sandpit-system",
  SANDPIT_DNS_CIDRS: "10.96.0.10/32",
});
const NS = "team-a";
/** A node and an API server with public addresses (as /32 exceptions). */
const cluster = ["198.51.100.4/32", "203.0.113.9/32"];

/** A network as the operator sees it: parsed through the CRD's schema, defaults applied. */
const net = (network: unknown, c = cfg) =>
  effectiveSpec(SandboxSpec.parse({ network }), undefined, c).network;
const egressOf = (network: unknown, addresses = cluster, c = cfg) =>
  egressPolicy(NS, net(network, c), c, addresses);
const rules = (network: unknown, addresses = cluster, c = cfg) =>
  (egressOf(network, addresses, c)?.spec as { egress: unknown[] } | undefined)?.egress;

const dnsRule = {
  to: [
    {
      namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } },
      podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
    },
    { ipBlock: { cidr: "10.96.0.10/32" } },
  ],
  ports: [
    { protocol: "UDP", port: 53 },
    { protocol: "TCP", port: 53 },
  ],
};

describe("the isolation policy", () => {
  const np = isolationPolicy(NS, cfg);

  it("selects every pod with a network key and governs both directions, reaching nothing out", () => {
    expect(np.metadata).toMatchObject({ name: ISOLATION_POLICY, namespace: NS });
    expect(np.metadata.ownerReferences).toBeUndefined(); // the namespace's, no sandbox's
    expect(np.spec).toMatchObject({
      podSelector: { matchExpressions: [{ key: LABEL.network, operator: "Exists" }] },
      policyTypes: ["Ingress", "Egress"],
      egress: [],
    });
  });

  it("accepts ingress only from the provisioner and operator pods of the system namespace, on 8080", () => {
    expect((np.spec as { ingress: unknown }).ingress).toEqual([
      {
        from: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sandpit-system" } },
            podSelector: {
              matchExpressions: [
                {
                  key: "app.kubernetes.io/name",
                  operator: "In",
                  values: ["sandpit-provisioner", "sandpit-operator"],
                },
              ],
            },
          },
        ],
        ports: [{ protocol: "TCP", port: 8080 }],
      },
    ]);
  });
});

describe("egress policies", () => {
  it("select the pods of their network key, and govern egress only (ingress is the isolation policy's)", () => {
    const np = egressOf({ egress: "Internet" })!;
    const key = networkKey(net({ egress: "Internet" }), cfg);
    expect(np.metadata).toMatchObject({
      name: egressPolicyName(key),
      labels: { [LABEL.network]: key },
    });
    expect(np.spec).toMatchObject({
      podSelector: { matchLabels: { [LABEL.network]: key } },
      policyTypes: ["Egress"],
    });
    expect(np.spec).not.toHaveProperty("ingress");
  });

  it("Deny has none: nothing out, DNS included (a resolver forwarding any name is a channel out)", () => {
    expect(egressOf({ egress: "Deny" })).toBeUndefined();
    expect(egressOf({ egress: "Allowlist" })).toBeUndefined();
  });

  it("Internet allows every address except private ranges, cloud metadata and the cluster's own", () => {
    expect(rules({ egress: "Internet" })).toEqual([
      dnsRule,
      { to: [{ ipBlock: { cidr: "0.0.0.0/0", except: [...BLOCKED_CIDRS, ...cluster] } }] },
    ]);
    for (const cidr of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"]) {
      expect(BLOCKED_CIDRS).toContain(cidr);
    }
    // The default is Internet, with the same blocks.
    expect(rules(undefined)).toEqual(rules({ egress: "Internet" }));
  });

  it("Internet also excludes the ranges the operator is told the cluster does not report", () => {
    // 203.0.113.9 is a node's too: listed once.
    const told = readConfig({ SANDPIT_EGRESS_EXCLUDE_CIDRS: "192.0.2.2/32,203.0.113.9/32" });
    expect(rules({}, cluster, told)?.[1]).toEqual({
      to: [
        {
          ipBlock: {
            cidr: "0.0.0.0/0",
            except: [...BLOCKED_CIDRS, "192.0.2.2/32", "203.0.113.9/32", "198.51.100.4/32"],
          },
        },
      ],
    });
  });

  it("Allowlist allows exactly the listed ranges, on their ports (all ports when none are listed)", () => {
    const allow = [{ cidr: "203.0.113.0/24", ports: [443, 8443] }, { cidr: "198.51.100.7/32" }];
    expect(rules({ egress: "Allowlist", allow })).toEqual([
      {
        to: [{ ipBlock: { cidr: "203.0.113.0/24" } }],
        ports: [
          { protocol: "TCP", port: 443 },
          { protocol: "TCP", port: 8443 },
        ],
      },
      { to: [{ ipBlock: { cidr: "198.51.100.7/32" } }] },
    ]);
  });

  it("Allowlist resolves names only when it asks for DNS", () => {
    const allow = [{ cidr: "203.0.113.0/24", ports: [443] }];
    expect(rules({ egress: "Allowlist", allow })).not.toContainEqual(dnsRule);
    expect(rules({ egress: "Allowlist", allow, dns: true })).toEqual([
      dnsRule,
      { to: [{ ipBlock: { cidr: "203.0.113.0/24" } }], ports: [{ protocol: "TCP", port: 443 }] },
    ]);
  });

  it("Allowlist with domains reaches the egress proxy's pods on its port, and no name service", () => {
    const proxied = readConfig({
      SANDPIT_SYSTEM_NAMESPACE: "sandpit-system",
      SANDPIT_EGRESS_PROXY: "10.96.7.7:3128",
    });
    const network = { egress: "Allowlist", allowDomains: ["pypi.org"] };
    expect(rules(network, cluster, proxied)).toEqual([
      {
        to: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sandpit-system" } },
            podSelector: { matchLabels: { [LABEL.name]: "sandpit-egress" } },
          },
        ],
        ports: [{ protocol: "TCP", port: 3128 }],
      },
    ]);
    // Which domains is the proxy's business: other lists reach the same pods, by the same key.
    const other = { egress: "Allowlist", allowDomains: ["*.github.com"] };
    expect(networkKey(net(other, proxied), proxied)).toBe(
      networkKey(net(network, proxied), proxied),
    );
    // With no proxy to reach, nothing is opened (the sandbox fails: notStartableReason).
    expect(egressOf(network)).toBeUndefined();
  });
});

describe("network keys", () => {
  const key = (network: unknown) => networkKey(net(network), cfg);

  it("are label values, the same for the same network and different for any other", () => {
    const internet = key({ egress: "Internet" });
    expect(internet).toMatch(/^[0-9a-f]{16}$/);
    expect(key({})).toBe(internet);
    const allow = (ports: number[]) =>
      key({ egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24", ports }] });
    const keys = [internet, key({ egress: "Deny" }), allow([443]), allow([80])];
    expect(new Set(keys).size).toBe(keys.length);
    expect(key({ egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24" }], dns: true })).not.toBe(
      key({ egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24" }] }),
    );
  });

  it("stay when the cluster's addresses change, while the egress policy's spec hash follows them", () => {
    const hash = (addresses: string[]) =>
      egressOf({ egress: "Internet" }, addresses)!.metadata.annotations?.[ANNOTATION.specHash];
    expect(hash(cluster)).toBe(hash([...cluster]));
    expect(hash(cluster)).not.toBe(hash([...cluster, "192.0.2.2/32"]));
    const name = (addresses: string[]) =>
      egressOf({ egress: "Internet" }, addresses)!.metadata.name;
    expect(name(cluster)).toBe(name([...cluster, "192.0.2.2/32"]));
    // With no public address of its own, a cluster's policy excludes the blocked ranges only.
    expect(rules({ egress: "Internet" }, [])?.[1]).toEqual({
      to: [{ ipBlock: { cidr: "0.0.0.0/0", except: BLOCKED_CIDRS } }],
    });
  });
});

/** An object as the cache holds it after the API server made it. */
const served = (o: KObject, creationTimestamp = new Date().toISOString()): KObject => ({
  ...o,
  metadata: { ...o.metadata, uid: `uid-${o.metadata.name}`, creationTimestamp },
});

describe("ensureNetwork", () => {
  it("writes the isolation and egress policies once, and nothing once the cache shows them", async () => {
    const { ctx, writes, caches } = fakeCtx({});
    const internet = net({ egress: "Internet" });
    const key = await ensureNetwork(ctx, NS, internet);
    expect(key).toBe(networkKey(internet, ctx.cfg));
    expect(writes.map(([verb, plural, o]) => [verb, plural, (o as KObject).metadata.name])).toEqual(
      [
        ["apply", "networkpolicies", ISOLATION_POLICY],
        ["apply", "networkpolicies", egressPolicyName(key)],
      ],
    );
    // A second sandbox of the burst, before the cache caught up: the writes are expected.
    await ensureNetwork(ctx, NS, internet);
    expect(writes).toHaveLength(2);
    // Once the cache shows them, nothing either, expectations or not.
    for (const [, , o] of writes) {
      caches.networkPolicies.objects.set((o as KObject).metadata.name, served(o as KObject));
    }
    await ensureNetwork(ctx, NS, internet);
    expect(writes).toHaveLength(2);
    // Deny needs the isolation policy alone, which is there.
    await ensureNetwork(ctx, NS, net({ egress: "Deny" }));
    expect(writes).toHaveLength(2);
  });

  it("writes an egress policy again when the cluster's addresses change it", async () => {
    const { ctx, writes, caches } = fakeCtx({});
    const internet = net({ egress: "Internet" });
    for (const o of [isolationPolicy(NS, ctx.cfg), egressPolicy(NS, internet, ctx.cfg, [])!]) {
      caches.networkPolicies.objects.set(o.metadata.name, served(o));
    }
    await ensureNetwork(ctx, NS, internet);
    expect(writes).toHaveLength(0);
    ctx.clusterAddresses = () => ["198.51.100.4/32"];
    await ensureNetwork(ctx, NS, internet);
    expect(writes.map(([verb, , o]) => [verb, (o as KObject).metadata.name])).toEqual([
      ["apply", egressPolicyName(networkKey(internet, ctx.cfg))],
    ]);
  });
});

describe("collecting unused egress policies", () => {
  const internet = net({ egress: "Internet" });
  const key = networkKey(internet, readConfig({}));
  const policy = (ageMs: number) =>
    served(
      egressPolicy(NS, internet, readConfig({}), [])!,
      new Date(Date.now() - ageMs).toISOString(),
    );
  const podWith = (labels: Record<string, string>): KObject => ({
    metadata: { name: "p", namespace: NS, labels },
  });
  const setup = (objects: Parameters<typeof fakeCtx>[0], np: KObject) => {
    const f = fakeCtx(objects);
    f.caches.networkPolicies.objects.set(np.metadata.name, np);
    return { ...f, run: () => reconcileEgressPolicy(f.ctx, `${NS}/${np.metadata.name}`) };
  };

  it("deletes one no pod, Sandbox or pool uses, once it is old enough, by its uid", async () => {
    const np = policy(UNUSED_GRACE_MS + 1_000);
    const { run, writes } = setup({}, np);
    expect(await run()).toBeUndefined();
    expect(writes).toEqual([
      ["delete", "networkpolicies", NS, np.metadata.name, { uid: np.metadata.uid }],
    ]);
  });

  it("waits out the grace period of a new one", async () => {
    const { run, writes } = setup({}, policy(1_000));
    const result = await run();
    expect(result?.requeueAfterMs).toBeGreaterThan(UNUSED_GRACE_MS - 5_000);
    expect(result?.requeueAfterMs).toBeLessThanOrEqual(UNUSED_GRACE_MS - 1_000);
    expect(writes).toEqual([]);
  });

  it("keeps one a pod carries the key of, or a Sandbox or pool would give a pod", async () => {
    const old = policy(10 * UNUSED_GRACE_MS);
    const cases: Parameters<typeof fakeCtx>[0][] = [
      { pods: [podWith({ [LABEL.network]: key })] },
      {
        sandboxes: [
          { metadata: { name: "s", namespace: NS }, spec: SandboxSpec.parse({}) } as KObject,
        ],
      },
      {
        pools: [
          {
            metadata: { name: "p", namespace: NS },
            spec: { maxActive: 1, warm: 1, template: {} },
          } as KObject,
        ],
      },
    ];
    for (const objects of cases) {
      const { run, writes } = setup(objects, old);
      expect(await run()).toBeUndefined();
      expect(writes, JSON.stringify(objects)).toEqual([]);
    }
    // Pods and Sandboxes of other networks do not keep it.
    const { run, writes } = setup(
      {
        pods: [podWith({ [LABEL.network]: "0123456789abcdef" })],
        sandboxes: [
          {
            metadata: { name: "s", namespace: NS },
            spec: SandboxSpec.parse({ network: { egress: "Deny" } }),
          } as KObject,
        ],
      },
      old,
    );
    await run();
    expect(writes.map(([verb]) => verb)).toEqual(["delete"]);
  });

  it("leaves alone policies that are not egress policies, and ones already gone", async () => {
    const own = served({ ...isolationPolicy(NS, readConfig({})) }, new Date(0).toISOString());
    const { run, writes } = setup({}, own);
    await run();
    const gone = fakeCtx({});
    await reconcileEgressPolicy(gone.ctx, `${NS}/${egressPolicyName(key)}`);
    expect([...writes, ...gone.writes]).toEqual([]);
  });
});

describe("a sandbox's pod and its network key", () => {
  const cfg0 = readConfig({});
  const sbx = {
    apiVersion: "sandpit.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name: "s", namespace: NS, uid: "uid-s" },
    spec: SandboxSpec.parse({ network: { egress: "Deny" } }),
  } as KObject & { spec: SandboxSpec };
  const eff = effectiveSpec(sbx.spec, undefined, cfg0);
  const deny = networkKey(eff.network, cfg0);
  const owned = (uid: string) => [{ kind: "Sandbox", name: "s", uid, controller: true }];
  const podOf = (labels: Record<string, string>, uid = "uid-s"): KObject => ({
    metadata: { name: "s", namespace: NS, labels, ownerReferences: owned(uid) as never },
  });
  /** A policy of the sandbox's own, as sandboxes had before policies were shared. */
  const ownPolicy: KObject = {
    metadata: { name: "s", namespace: NS, uid: "uid-np", ownerReferences: owned("uid-s") as never },
  };
  const run = async (pods: KObject[], policies: KObject[] = []) => {
    const f = fakeCtx({ pods });
    for (const p of [isolationPolicy(NS, f.ctx.cfg), ...policies])
      f.caches.networkPolicies.objects.set(p.metadata.name, served(p));
    await isolate(f.ctx, sbx as never, eff, "s");
    return f.writes.map(([verb, plural, ...rest]) => [verb, plural, ...rest.slice(0, 2)]);
  };

  it("relabels a running pod whose network changed, or that was made before keys", async () => {
    expect(await run([podOf({ [LABEL.network]: "0123456789abcdef" })])).toEqual([
      ["patch", "pods", NS, "s"],
    ]);
    expect(await run([podOf({})])).toEqual([["patch", "pods", NS, "s"]]);
    expect(await run([podOf({ [LABEL.network]: deny })])).toEqual([]);
  });

  it("leaves a warm pod it does not own yet to the claim, which sets its key", async () => {
    expect(await run([podOf({ [LABEL.warm]: "true" }, "uid-pool")])).toEqual([]);
  });

  it("deletes the sandbox's own policy of old once its pod carries a key, or it has no pod", async () => {
    const deleted = [["delete", "networkpolicies", NS, "s"]];
    expect(await run([podOf({ [LABEL.network]: deny })], [ownPolicy])).toEqual(deleted);
    expect(await run([], [ownPolicy])).toEqual(deleted);
    // A namesake's (another uid) is not this sandbox's to delete here.
    const other = {
      ...ownPolicy,
      metadata: { ...ownPolicy.metadata, ownerReferences: owned("x") },
    };
    expect(await run([podOf({ [LABEL.network]: deny })], [other as KObject])).toEqual([]);
  });
});
