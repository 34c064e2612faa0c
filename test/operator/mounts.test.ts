/**
 * Claims mounted into sandboxes on the real cluster: skills on a shared claim, read-only; the
 * user-data volume as a thread's directory of a shared claim, where another process's uploads
 * appear and the sandbox's outputs come back; a missing claim or id explained in status; and
 * mounts the API server refuses.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { dataClaimName } from "@sandpit/operator/api";
import {
  type Clients,
  type OperatorProcess,
  clients,
  createClaim,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  pools,
  runCode,
  runInClaim,
  sandboxes,
  startOperator,
  tokenOf,
  waitFor,
  waitForPhase,
} from "../cluster/harness.ts";

let c: Clients;
let ns: string;
let operator: OperatorProcess;
let image: string;

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  image = inject("clusterSandboxImage");
  await ensureCrds(c);
  ns = await createNamespace(c, "op-mounts");
  operator = await startOperator({ kubeconfig: inject("kubeconfig"), namespace: ns, image });
});

afterAll(async () => {
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

const run = async (name: string, code: string) => {
  const s = await sandboxes.get(c, ns, name);
  return runCode(s.status!.endpoint!, await tokenOf(c, ns, name), code);
};

const readyReason = async (name: string) =>
  (await sandboxes.get(c, ns, name)).status?.conditions?.find((x) => x.type === "Ready");

describe("mounts", () => {
  test(
    "skills from a shared claim, read-only at /mnt/skills: readable, not writable",
    { timeout: 240_000 },
    async () => {
      await createClaim(c, ns, "skills");
      await runInClaim(c, ns, {
        claim: "skills",
        image,
        script: "mkdir -p /claim/public/demo && echo 'use me' > /claim/public/demo/SKILL.md",
      });
      await sandboxes.create(c, ns, "skilled", {
        mounts: [
          { claimName: "skills", mountPath: "/mnt/skills", readOnly: true, subPath: "public" },
        ],
      });
      await waitForPhase(c, ns, "skilled", "Ready");
      const read = await run("skilled", "print(open('/mnt/skills/demo/SKILL.md').read(), end='')");
      expect(read.stdout).toBe("use me\n");
      const write = await run(
        "skilled",
        "try:\n  open('/mnt/skills/demo/x', 'w').write('no')\n  print('wrote')\nexcept OSError as e:\n  print(type(e).__name__, e.errno)",
      );
      expect(write.stdout).toMatch(/^OSError 30\n$/); // EROFS
      const pod = await c.core.readNamespacedPod({ name: "skilled", namespace: ns });
      expect(pod.spec?.securityContext?.runAsNonRoot).toBe(true);
      expect(pod.spec?.containers[0]?.securityContext?.readOnlyRootFilesystem).toBe(true);
    },
  );

  test(
    "user data as a thread's directory of a shared claim: uploads appear, outputs come back",
    { timeout: 240_000 },
    async () => {
      await createClaim(c, ns, "deerflow");
      await runInClaim(c, ns, {
        claim: "deerflow",
        image,
        script:
          "d=/claim/users/u1/threads/t1/user-data && mkdir -p $d/uploads $d/outputs && echo uploaded > $d/uploads/x",
      });
      await sandboxes.create(c, ns, "thread", {
        userId: "u1",
        threadId: "t1",
        storage: {
          sharedClaim: {
            claimName: "deerflow",
            subPath: "users/{user}/threads/{thread}/user-data",
          },
        },
      });
      await waitForPhase(c, ns, "thread", "Ready");
      const read = await run("thread", "print(open('/mnt/user-data/uploads/x').read(), end='')");
      expect(read.stdout).toBe("uploaded\n");
      await run("thread", "open('/mnt/user-data/outputs/report.md', 'w').write('made here\\n')");
      const back = await runInClaim(c, ns, {
        claim: "deerflow",
        image,
        script: "cat /claim/users/u1/threads/t1/user-data/outputs/report.md",
      });
      expect(back).toBe("made here\n");
      // No claim of its own was made.
      const claims = await c.core.listNamespacedPersistentVolumeClaim({ namespace: ns });
      expect(claims.items.map((x) => x.metadata?.name)).not.toContain(dataClaimName("thread"));
    },
  );

  test(
    "a claim that does not exist: Pending with ClaimNotFound, Ready once it is created",
    { timeout: 180_000 },
    async () => {
      await sandboxes.create(c, ns, "waits", {
        mounts: [{ claimName: "later", mountPath: "/mnt/later" }],
      });
      const cond = await waitFor("ClaimNotFound", 60_000, async () => {
        const r = await readyReason("waits");
        return r?.reason === "ClaimNotFound" ? r : undefined;
      });
      expect(cond.message).toMatch(/PersistentVolumeClaim later does not exist/);
      expect((await sandboxes.get(c, ns, "waits")).status?.phase).toBe("Pending");
      await createClaim(c, ns, "later");
      await waitForPhase(c, ns, "waits", "Ready");
    },
  );

  test("a subPath naming a thread the sandbox lacks: Failed with InvalidMounts, no pod", async () => {
    await sandboxes.create(c, ns, "nothread", {
      userId: "u1",
      storage: { sharedClaim: { claimName: "deerflow", subPath: "users/{user}/threads/{thread}" } },
    });
    const failed = await waitForPhase(c, ns, "nothread", "Failed", 30_000);
    expect(failed.status?.conditions?.find((x) => x.type === "Ready")?.reason).toBe(
      "InvalidMounts",
    );
    const pods = await c.core.listNamespacedPod({
      namespace: ns,
      labelSelector: "sandpit.dev/sandbox=nothread",
    });
    expect(pods.items).toEqual([]);
  });

  test("a pool whose template gives each sandbox its own directory keeps no warm pods", async () => {
    await pools.create(c, ns, "per-thread", {
      maxActive: 2,
      warm: 1,
      template: {
        storage: {
          sharedClaim: { claimName: "deerflow", subPath: "users/{user}/threads/{thread}" },
        },
      },
    });
    const ready = await waitFor("the pool's status", 30_000, async () => {
      const p = (await pools.get(c, ns, "per-thread")) as {
        status?: { warmReady?: number; conditions?: { type: string; reason: string }[] };
      };
      return p.status?.conditions?.find((x) => x.type === "Ready");
    });
    expect(ready.reason).toBe("WarmNotApplicable");
    const warm = await c.core.listNamespacedPod({
      namespace: ns,
      labelSelector: "sandpit.dev/pool=per-thread",
    });
    expect(warm.items).toEqual([]);
  });
});

describe("mounts the API server refuses, with a message", () => {
  const cases: [string, unknown, RegExp][] = [
    ["a relative mountPath", [{ claimName: "c", mountPath: "mnt/x" }], /mountPath/],
    [
      "a mount over sandboxd's volume",
      [{ claimName: "c", mountPath: "/mnt/user-data/x" }],
      /may not cover, lie under or contain/,
    ],
    [
      "a mount over /mnt, which holds the user-data volume",
      [{ claimName: "c", mountPath: "/mnt" }],
      /may not cover/,
    ],
    [
      "a mountPath climbing out",
      [{ claimName: "c", mountPath: "/mnt/a/../tmp" }],
      /no '\.' or '\.\.' segments/,
    ],
    [
      "a subPath climbing out",
      [{ claimName: "c", mountPath: "/mnt/x", subPath: "a/../../b" }],
      /no '\.' or '\.\.' segments/,
    ],
    [
      "two mounts at one path",
      [
        { claimName: "c", mountPath: "/mnt/x" },
        { claimName: "d", mountPath: "/mnt/x" },
      ],
      /Duplicate value/,
    ],
  ];
  test.each(cases)("%s", async (_what, mounts, message) => {
    const err = await sandboxes
      .create(c, ns, `bad-${Math.random().toString(36).slice(2, 7)}`, { mounts })
      .then(
        () => undefined,
        (e: { code?: number; body?: string }) => e,
      );
    expect(err?.code).toBe(422);
    expect((JSON.parse(String(err?.body)) as { message: string }).message).toMatch(message);
  });
});
