/**
 * Warm pods' tokens are per pod (docs/security.md, "Credentials"). Before, every warm pod of a
 * pool verified one pool-wide token from the Secret `<pool>-warm-token`: whoever learnt it opened
 * every warm pod not yet adopted. Now each warm pod's token is derived from the token key, its
 * namespace, its name and a random id on the pod, and the pod is given its digest only, as a
 * plain value: no Secret and no API write per pod.
 */
import { createHash, createHmac } from "node:crypto";
import { describe, expect, test } from "vitest";
import { ANNOTATION, LABEL } from "../src/api/labels.ts";
import {
  TOKEN_KEY_SECRET,
  derivedToken,
  keyFingerprint,
  warmPodToken,
} from "../src/api/reservations.ts";
import type { SandboxPool } from "../src/api/v1alpha1.ts";
import type { Pod } from "../src/kube/resources.ts";
import type { KObject } from "../src/kube/rest.ts";
import { Pools } from "../src/pool/pools.ts";
import { reconcilePool } from "../src/pool/reconciler.ts";
import { warmTokenOf } from "../src/pool/warm.ts";
import { fakeCtx as fakeContext } from "./fake-ctx.ts";

const NS = "sbx-ns";
const KEY = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");
const b64 = (s: string) => Buffer.from(s).toString("base64");

describe("a warm pod's token", () => {
  test("is HMAC-SHA256 of the namespace, pod name and token id under the token key", () => {
    expect(warmPodToken(KEY, NS, "pool-abc123", "id1")).toBe(
      createHmac("sha256", KEY).update(`warm\0${NS}\0pool-abc123\0id1`).digest("hex"),
    );
    expect(warmPodToken(KEY, NS, "pool-abc123", "id1")).toMatch(/^[0-9a-f]{64}$/);
  });

  test("differs for two pods, for another namespace, another id and another key", () => {
    const x = warmPodToken(KEY, NS, "pool-aaaaaa", "id1");
    expect(warmPodToken(KEY, NS, "pool-bbbbbb", "id1")).not.toBe(x);
    expect(warmPodToken(KEY, "other-ns", "pool-aaaaaa", "id1")).not.toBe(x);
    // A pod made again under the same name (another id) gets another token.
    expect(warmPodToken(KEY, NS, "pool-aaaaaa", "id2")).not.toBe(x);
    expect(warmPodToken(`${KEY}x`, NS, "pool-aaaaaa", "id1")).not.toBe(x);
    // Nor is it any sandbox's token: the two derivations are kept apart.
    expect(derivedToken(KEY, "pool-aaaaaa")).not.toBe(x);
  });
});

const pool: SandboxPool = {
  apiVersion: "sandpit.dev/v1alpha1",
  kind: "SandboxPool",
  metadata: { name: "p", namespace: NS, uid: "pool-uid", generation: 1, resourceVersion: "1" },
  spec: { warm: 2, maxActive: 5, template: {} },
} as SandboxPool;

const secret = (name: string, data: Record<string, string>): KObject =>
  ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: NS, uid: `uid-${name}` },
    data,
  }) as KObject;

/** A context whose caches hold `pods` and `secrets`; every write is recorded, none is made. */
const fakeCtx = (pods: Pod[], secrets: KObject[]) => fakeContext({ pools: [pool], pods, secrets });

const keySecret = secret(TOKEN_KEY_SECRET, { key: b64(KEY) });

type PodManifest = Pod & {
  spec: { containers: { env: { name: string; value?: string; valueFrom?: unknown }[] }[] };
};

describe("the pool reconciler", () => {
  test("makes each warm pod with its own token's digest, as a plain value, and no Secret", async () => {
    const { ctx, writes } = fakeCtx([], [keySecret]);
    await reconcilePool(ctx, new Pools(ctx), `${NS}/p`, new AbortController().signal);
    const made = writes
      .filter(([verb, plural]) => verb === "apply" && plural === "pods")
      .map(([, , pod]) => pod as PodManifest);
    expect(made).toHaveLength(2);
    // No token Secret at all: not the pool's old one, not one per pod.
    expect(writes.filter(([, plural]) => plural === "secrets")).toEqual([]);
    const tokens = made.map((p) => {
      const id = p.metadata.annotations?.[ANNOTATION.warmTokenId];
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      expect(p.metadata.annotations?.[ANNOTATION.warmTokenKey]).toBe(keyFingerprint(KEY));
      expect(keyFingerprint(KEY)).not.toContain(KEY.slice(0, 8));
      const env = p.spec.containers[0]!.env;
      expect(env.find((e) => e.name === "SANDBOXD_TOKEN")).toBeUndefined();
      const digest = env.find((e) => e.name === "SANDBOXD_TOKEN_SHA256");
      const token = warmPodToken(KEY, NS, p.metadata.name, id!);
      // The digest itself, not a reference to a Secret.
      expect(digest).toEqual({ name: "SANDBOXD_TOKEN_SHA256", value: sha256(token) });
      expect(JSON.stringify(p)).not.toContain(token);
      return token;
    });
    expect(new Set(made.map((p) => p.metadata.name)).size).toBe(2);
    expect(tokens[0]).not.toBe(tokens[1]);
    // Each pod's digest matches its own token only.
    const digests = made.map((p) => p.spec.containers[0]!.env[0]!.value);
    expect(sha256(tokens[0]!)).not.toBe(digests[1]);
    expect(sha256(tokens[1]!)).not.toBe(digests[0]);
  });

  const warmPod = (name: string, annotations: Record<string, string>, warm = true): Pod =>
    ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name,
        namespace: NS,
        uid: `uid-${name}`,
        labels: { [LABEL.pool]: "p", ...(warm ? { [LABEL.warm]: "true" } : {}) },
        annotations: {
          [ANNOTATION.templateHash]: "old",
          [ANNOTATION.shapeHash]: "s",
          ...annotations,
        },
      },
      status: { phase: "Running", podIP: "10.0.0.9" },
    }) as Pod;
  const legacySecret = secret("p-warm-token", { token: b64("the-pool-token") });

  test("opens a pod with its own token, and one made before per-pod tokens with the pool's", async () => {
    const fresh = warmPod("p-aaaaaa", { [ANNOTATION.warmTokenId]: "id-a" });
    const other = warmPod("p-bbbbbb", { [ANNOTATION.warmTokenId]: "id-b" });
    const old = warmPod("p-cccccc", {});
    const { ctx } = fakeCtx([fresh, other, old], [keySecret, legacySecret]);
    expect(await warmTokenOf(ctx, pool, fresh)).toBe(warmPodToken(KEY, NS, "p-aaaaaa", "id-a"));
    expect(await warmTokenOf(ctx, pool, other)).toBe(warmPodToken(KEY, NS, "p-bbbbbb", "id-b"));
    expect(await warmTokenOf(ctx, pool, fresh)).not.toBe(await warmTokenOf(ctx, pool, other));
    expect(await warmTokenOf(ctx, pool, old)).toBe("the-pool-token");
    // Without the pool's Secret an old pod cannot be opened (the pool replaces it).
    expect(await warmTokenOf(fakeCtx([old], [keySecret]).ctx, pool, old)).toBeUndefined();
    // Nor can one made under a token key since replaced.
    const underOldKey = warmPod("p-eeeeee", {
      [ANNOTATION.warmTokenId]: "id-e",
      [ANNOTATION.warmTokenKey]: keyFingerprint("the-key-before"),
    });
    expect(await warmTokenOf(ctx, pool, underOldKey)).toBeUndefined();
    const underThisKey = warmPod("p-ffffff", {
      [ANNOTATION.warmTokenId]: "id-f",
      [ANNOTATION.warmTokenKey]: keyFingerprint(KEY),
    });
    expect(await warmTokenOf(ctx, pool, underThisKey)).toBe(
      warmPodToken(KEY, NS, "p-ffffff", "id-f"),
    );
  });

  test("keeps the pool's old Secret while a pod made with it lives, adopted or warm, and deletes it after", async () => {
    const adoptedOld = warmPod("p-cccccc", {}, false);
    const deletesOf = (writes: [string, string, ...unknown[]][]) =>
      writes.filter(([verb, plural]) => verb === "delete" && plural === "secrets");

    const still = fakeCtx([adoptedOld], [keySecret, legacySecret]);
    await reconcilePool(still.ctx, new Pools(still.ctx), `${NS}/p`, new AbortController().signal);
    expect(deletesOf(still.writes)).toEqual([]);

    const warmOld = fakeCtx([warmPod("p-dddddd", {})], [keySecret, legacySecret]);
    await reconcilePool(
      warmOld.ctx,
      new Pools(warmOld.ctx),
      `${NS}/p`,
      new AbortController().signal,
    );
    expect(deletesOf(warmOld.writes)).toEqual([]);

    const gone = fakeCtx(
      [warmPod("p-aaaaaa", { [ANNOTATION.warmTokenId]: "id-a" })],
      [keySecret, legacySecret],
    );
    await reconcilePool(gone.ctx, new Pools(gone.ctx), `${NS}/p`, new AbortController().signal);
    expect(deletesOf(gone.writes)).toEqual([
      ["delete", "secrets", NS, "p-warm-token", { uid: "uid-p-warm-token" }],
    ]);
  });

  test("replaces a warm pod made before per-pod tokens like one of an older template", async () => {
    const { ctx, writes } = fakeCtx([], [keySecret]);
    await reconcilePool(ctx, new Pools(ctx), `${NS}/p`, new AbortController().signal);
    const made = writes
      .filter(([verb, plural]) => verb === "apply" && plural === "pods")
      .map(([, , pod]) => pod as Pod);
    // The same template, one pod without its token id: it is not counted as current, so a new
    // one is made beside the current one.
    const current = made[0]!;
    const old = structuredClone(current);
    old.metadata.name = "p-old000";
    delete old.metadata.annotations![ANNOTATION.warmTokenId];
    const again = fakeCtx([current, old], [keySecret, legacySecret]);
    await reconcilePool(again.ctx, new Pools(again.ctx), `${NS}/p`, new AbortController().signal);
    expect(
      again.writes.filter(([verb, plural]) => verb === "apply" && plural === "pods"),
    ).toHaveLength(1);
    // Likewise one made under a token key since replaced.
    const stale = structuredClone(current);
    stale.metadata.name = "p-key000";
    stale.metadata.annotations![ANNOTATION.warmTokenKey] = keyFingerprint("the-key-before");
    const rekeyed = fakeCtx([current, stale], [keySecret]);
    await reconcilePool(
      rekeyed.ctx,
      new Pools(rekeyed.ctx),
      `${NS}/p`,
      new AbortController().signal,
    );
    expect(
      rekeyed.writes.filter(([verb, plural]) => verb === "apply" && plural === "pods"),
    ).toHaveLength(1);
  });
});
