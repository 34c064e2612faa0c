/**
 * The pool gives back warm pods reserved by provisioner replicas that are gone, and only those
 * (operator/src/pool/warm.ts reclaimReservations).
 */
import { describe, expect, test } from "vitest";
import { LABEL } from "../src/api/labels.ts";
import { RESERVATION } from "../src/api/reservations.ts";
import type { Sandbox, SandboxPool } from "../src/api/v1alpha1.ts";
import type { Pod } from "../src/kube/resources.ts";
import { reclaimReservations } from "../src/pool/warm.ts";
import { fakeCtx } from "./fake-ctx.ts";

const NS = "ns";
const pool = {
  apiVersion: "sandpit.dev/v1alpha1",
  kind: "SandboxPool",
  metadata: { name: "p", namespace: NS, uid: "pool-uid" },
  spec: { warm: 2, maxActive: 5, template: {} },
} as SandboxPool;

const warmPod = (name: string, resourceVersion: string, holder?: string): Pod =>
  ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      uid: `uid-${name}`,
      resourceVersion,
      labels: { [LABEL.pool]: "p", [LABEL.warm]: "true" },
      annotations: holder ? { [RESERVATION.holder]: holder } : {},
    },
    status: { podIP: "10.0.0.1" },
  }) as unknown as Pod;

/** Holders whose Leases are alive; `onAsk` runs while the answer is on its way. */
const holders = (live: string[], onAsk: () => void = () => undefined) => ({
  alive: async (_ns: string, holder: string) => {
    onAsk();
    await Promise.resolve();
    return live.includes(holder);
  },
});

const givenBack = (writes: unknown[][]) =>
  writes
    .filter(([verb, plural]) => verb === "patch" && plural === "pods")
    .map(([, , , name, , body]) => ({
      name,
      resourceVersion: (body as { metadata: { resourceVersion?: string } }).metadata
        .resourceVersion,
    }));

describe("giving back reservations", () => {
  test("gives back a dead holder's pod, guarded by the version it was judged on", async () => {
    const { ctx, writes } = fakeCtx({
      pools: [pool],
      pods: [warmPod("a", "5", "dead"), warmPod("b", "6", "live"), warmPod("c", "7")],
    });
    await reclaimReservations(ctx, { holders: holders(["live"]) } as never, pool);
    expect(givenBack(writes)).toEqual([{ name: "a", resourceVersion: "5" }]);
  });

  test("never a pod a live replica reserves while a holder's Lease is being read", async () => {
    // The pool looks at its pods; while it asks whether the holder of "a" is alive, the
    // replica "live" reserves "b" (and may hand it to a create at once). Judged unreserved a
    // moment before, "b" must not be given back with its new version: the replica would
    // reserve it again for a second create, one pod for two sandboxes.
    const { ctx, writes, caches } = fakeCtx({
      pools: [pool],
      pods: [warmPod("a", "5", "dead"), warmPod("b", "6")],
    });
    let asked = false;
    const reserveB = () => {
      if (asked) return;
      asked = true;
      caches.pods.objects.set("b", warmPod("b", "8", "live"));
    };
    await reclaimReservations(ctx, { holders: holders(["live"], reserveB) } as never, pool);
    expect(asked).toBe(true);
    expect(givenBack(writes)).toEqual([{ name: "a", resourceVersion: "5" }]);
  });

  test("never a pod a Sandbox names, holder dead or not", async () => {
    const sandbox = {
      apiVersion: "sandpit.dev/v1alpha1",
      kind: "Sandbox",
      metadata: {
        name: "s",
        namespace: NS,
        uid: "s-uid",
        annotations: { [RESERVATION.pod]: "a", [RESERVATION.holder]: "dead" },
      },
      spec: {},
    } as unknown as Sandbox;
    const { ctx, writes } = fakeCtx({
      pools: [pool],
      pods: [warmPod("a", "5", "dead")],
      sandboxes: [sandbox],
    });
    await reclaimReservations(ctx, { holders: holders([]) } as never, pool);
    expect(givenBack(writes)).toEqual([]);
  });
});
