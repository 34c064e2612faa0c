/**
 * The provisioner opens a reserved warm pod with that pod's own warm token, derived from the
 * token key it shares with the operator (docs/security.md, "Credentials"); only a pod made
 * before warm tokens were per pod is opened with its pool's token.
 */
import { pino } from "pino";
import { describe, expect, test } from "vitest";
import { TOKEN_KEY_SECRET, keyFingerprint, warmPodToken } from "@sandpit/operator/api";
import type { Kube, Secret } from "@sandpit/operator/kube/client";
import { Reservations } from "../src/reservations.ts";

const NS = "sbx-ns";
const KEY = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/** A kube that serves two Secrets and records which it was asked for. */
function fakeKube() {
  const asked: string[] = [];
  const secrets: Record<string, Record<string, string>> = {
    [TOKEN_KEY_SECRET]: { key: Buffer.from(KEY).toString("base64") },
    "p-warm-token": { token: Buffer.from("the-pool-token").toString("base64") },
  };
  const kube = {
    get: async (_r: unknown, ns: string, name: string): Promise<Secret> => {
      asked.push(`${ns}/${name}`);
      const data = secrets[name];
      if (!data) throw new Error(`no Secret ${name}`);
      return { metadata: { name, namespace: ns }, data } as Secret;
    },
  } as unknown as Kube;
  return { kube, asked, secrets };
}

describe("a reserved warm pod's token", () => {
  const reservations = (kube: Kube) =>
    new Reservations(kube, NS, pino({ level: "silent" }), { size: 2, leaseSeconds: 15 });

  test("is the pod's own, derived from the key, its name and its token id", async () => {
    const { kube, asked } = fakeKube();
    const r = reservations(kube);
    const x = await r.warmToken({
      pool: "p",
      podName: "p-aaaaaa",
      podIP: "10.0.0.1",
      tokenId: "ia",
    });
    const y = await r.warmToken({
      pool: "p",
      podName: "p-bbbbbb",
      podIP: "10.0.0.2",
      tokenId: "ib",
    });
    expect(x).toBe(warmPodToken(KEY, NS, "p-aaaaaa", "ia"));
    expect(y).toBe(warmPodToken(KEY, NS, "p-bbbbbb", "ib"));
    expect(x).not.toBe(y);
    // The pool's Secret is not read at all for such pods.
    expect(asked).toEqual([`${NS}/${TOKEN_KEY_SECRET}`]);
  });

  test("is derived from the key read again when the pod was made under a newer one", async () => {
    const { kube, asked, secrets } = fakeKube();
    const r = reservations(kube);
    const before = { pool: "p", podName: "p-aaaaaa", podIP: "10.0.0.1", tokenId: "ia" };
    expect(await r.warmToken(before)).toBe(warmPodToken(KEY, NS, "p-aaaaaa", "ia"));
    // The key is replaced; a pod made since says so.
    const NEW_KEY = "0".repeat(64);
    secrets[TOKEN_KEY_SECRET] = { key: Buffer.from(NEW_KEY).toString("base64") };
    const since = { ...before, podName: "p-dddddd", keyFingerprint: keyFingerprint(NEW_KEY) };
    expect(await r.warmToken(since)).toBe(warmPodToken(NEW_KEY, NS, "p-dddddd", "ia"));
    expect(asked).toEqual([`${NS}/${TOKEN_KEY_SECRET}`, `${NS}/${TOKEN_KEY_SECRET}`]);
  });

  test("is the pool's for a pod made before warm tokens were per pod", async () => {
    const { kube, asked } = fakeKube();
    const r = reservations(kube);
    expect(await r.warmToken({ pool: "p", podName: "p-cccccc", podIP: "10.0.0.3" })).toBe(
      "the-pool-token",
    );
    expect(asked).toEqual([`${NS}/p-warm-token`]);
  });
});
