/**
 * A Sandbox's life on the real cluster, driven by the real operator: apply → Ready → code runs
 * at its endpoint → suspend (pod gone, data kept) → resume → the file is still there →
 * delete → every child gone; plus TTL expiry, idle timeout, a pod killed from outside, and
 * invalid specs rejected with messages a user understands.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { parseAllDocuments } from "yaml";
import {
  type Clients,
  type OperatorProcess,
  childrenOf,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  runCode,
  sandboxes,
  startOperator,
  tokenOf,
  waitFor,
  waitForPhase,
} from "../cluster/harness.ts";

let c: Clients;
let ns: string;
let operator: OperatorProcess;

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  ns = await createNamespace(c, "op-life");
  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
});

afterAll(async () => {
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

describe("a sandbox's lifecycle", () => {
  test(
    "apply → Ready → run code at its endpoint → suspend → resume keeps files → delete removes every child",
    { timeout: 300_000 },
    async () => {
      await sandboxes.create(c, ns, "life", {
        language: "python",
        env: [{ name: "GREETING", value: "hello" }],
      });
      const ready = await waitForPhase(c, ns, "life", "Ready");
      expect(ready.status?.podName).toBe("life");
      expect(ready.status?.conditions?.find((x) => x.type === "Ready")?.status).toBe("True");

      const token = await tokenOf(c, ns, "life");
      // The status's endpoint is how the provisioner and the operator reach sandboxd: a sandbox
      // has no Service of its own.
      const first = await runCode(
        ready.status!.endpoint!,
        token,
        "import os\nopen('/mnt/user-data/keep.txt','w').write('kept')\nprint(os.environ['GREETING'], 6*7)",
      );
      expect((await childrenOf(c, ns, "life")).services).toEqual([]);
      expect(first.stdout).toBe("hello 42\n");

      // The pod runs hardened.
      const pod = await c.core.readNamespacedPod({ name: "life", namespace: ns });
      expect(pod.spec?.automountServiceAccountToken).toBe(false);
      expect(pod.spec?.securityContext?.runAsNonRoot).toBe(true);
      expect(pod.spec?.securityContext?.seccompProfile?.type).toBe("RuntimeDefault");
      const sc = pod.spec?.containers[0]?.securityContext;
      expect(sc?.allowPrivilegeEscalation).toBe(false);
      expect(sc?.readOnlyRootFilesystem).toBe(true);
      expect(sc?.capabilities?.drop).toEqual(["ALL"]);
      expect(pod.spec?.containers[0]?.resources?.limits?.["ephemeral-storage"]).toBeDefined();

      await sandboxes.patchSpec(c, ns, "life", { lifecycle: { suspended: true } });
      const suspended = await waitForPhase(c, ns, "life", "Suspended");
      expect(suspended.status?.conditions?.find((x) => x.type === "Suspended")?.reason).toBe(
        "UserRequested",
      );
      await waitFor(
        "the pod to be gone",
        30_000,
        async () => (await childrenOf(c, ns, "life")).pods.length === 0,
      );
      const whileSuspended = await childrenOf(c, ns, "life");
      expect(whileSuspended.claims.map((x) => x.metadata?.name)).toEqual(["life-data"]);
      expect(whileSuspended.secrets).toHaveLength(1);

      await sandboxes.patchSpec(c, ns, "life", { lifecycle: { suspended: false } });
      const resumed = await waitForPhase(c, ns, "life", "Ready");
      const again = await runCode(
        resumed.status!.endpoint!,
        token,
        "print(open('/mnt/user-data/keep.txt').read())",
      );
      expect(again.stdout).toBe("kept\n");

      await sandboxes.delete(c, ns, "life");
      await waitFor("every child of the deleted sandbox to be gone", 60_000, async () => {
        const left = await childrenOf(c, ns, "life");
        return Object.values(left).every((items) => items.length === 0);
      });
    },
  );

  test(
    "a pod deleted from outside is recreated and the sandbox is Ready again",
    { timeout: 240_000 },
    async () => {
      await sandboxes.create(c, ns, "phoenix", {});
      const before = await waitForPhase(c, ns, "phoenix", "Ready");
      const oldPod = await c.core.readNamespacedPod({ name: "phoenix", namespace: ns });
      await c.core.deleteNamespacedPod({ name: "phoenix", namespace: ns, gracePeriodSeconds: 0 });
      const after = await waitFor("a new pod serving", 90_000, async () => {
        const s = await sandboxes.get(c, ns, "phoenix");
        const pod = await c.core
          .readNamespacedPod({ name: "phoenix", namespace: ns })
          .catch(() => undefined);
        return s.status?.phase === "Ready" && pod && pod.metadata?.uid !== oldPod.metadata?.uid
          ? s
          : undefined;
      });
      expect(after.status?.endpoint).toBeDefined();
      const token = await tokenOf(c, ns, "phoenix");
      expect((await runCode(after.status!.endpoint!, token, "print('back')")).stdout).toBe(
        "back\n",
      );
      expect(before.metadata.uid).toBe(after.metadata.uid);
    },
  );

  test.concurrent(
    "a pod the kubelet evicts (an emptyDir past its limit) leaves why on the Sandbox, which comes back",
    { timeout: 300_000 },
    async () => {
      // /tmp is a tmpfs that refuses writes past its size; a disk-backed emptyDir of spec.emptyDirs
      // is still held to its 512Mi only by the kubelet's eviction.
      await sandboxes.create(c, ns, "hoarder", { emptyDirs: ["/mnt/scratch"] });
      const ready = await waitForPhase(c, ns, "hoarder", "Ready");
      const oldPod = await c.core.readNamespacedPod({ name: "hoarder", namespace: ns });
      const token = await tokenOf(c, ns, "hoarder");
      // 600 MiB into an emptyDir of 512Mi: the kubelet's eviction manager ends the pod (the
      // call itself may or may not answer before it does).
      await runCode(
        ready.status!.endpoint!,
        token,
        "with open('/mnt/scratch/fill', 'wb') as f:\n    for _ in range(600):\n        f.write(bytes(1 << 20))\nprint('written')",
      ).catch(() => undefined);
      const failed = await waitFor(
        "the eviction on the Sandbox",
        180_000,
        async () => {
          const s = await sandboxes.get(c, ns, "hoarder");
          return s.status?.lastFailure ? s : undefined;
        },
        500,
      );
      const why = failed.status!.lastFailure!;
      expect(["Evicted", "TerminationByKubelet"], JSON.stringify(why)).toContain(why.reason);
      expect(why.message).toMatch(/empty-0|ephemeral/i);
      expect(why.podUID).toBe(oldPod.metadata!.uid);
      const events = await c.core.listNamespacedEvent({
        namespace: ns,
        fieldSelector: `involvedObject.name=hoarder,involvedObject.kind=Sandbox,reason=${why.reason}`,
      });
      expect(events.items.map((e) => e.message).join("\n")).toMatch(/empty-0|ephemeral/i);
      // Then it is back on a new pod, and says why the last one died still.
      const back = await waitFor("Ready on a new pod", 120_000, async () => {
        const s = await sandboxes.get(c, ns, "hoarder");
        const pod = await c.core
          .readNamespacedPod({ name: "hoarder", namespace: ns })
          .catch(() => undefined);
        return s.status?.phase === "Ready" && pod?.metadata?.uid !== oldPod.metadata!.uid
          ? s
          : undefined;
      });
      expect(back.status?.lastFailure).toEqual(why);
    },
  );

  test.concurrent(
    "TTL: the sandbox is deleted when its lifetime ends",
    { timeout: 150_000 },
    async () => {
      await sandboxes.create(c, ns, "mayfly", { lifecycle: { ttlSeconds: 60 } });
      const ready = await waitForPhase(c, ns, "mayfly", "Ready");
      const created = Date.parse(ready.metadata.creationTimestamp!);
      expect(Date.parse(ready.status!.expiresAt!)).toBe(created + 60_000);
      await waitFor(
        "the expired sandbox to be deleted",
        120_000,
        async () => {
          const gone = await sandboxes.get(c, ns, "mayfly").then(
            () => false,
            (err: { code?: number }) => err.code === 404,
          );
          return gone;
        },
        500,
      );
      expect(Date.now()).toBeGreaterThanOrEqual(created + 60_000);
      await waitFor("its children to be gone", 60_000, async () =>
        Object.values(await childrenOf(c, ns, "mayfly")).every((items) => items.length === 0),
      );
    },
  );

  test.concurrent(
    "idle timeout never suspends a sandbox while a silent process runs (sandboxd's own measure)",
    { timeout: 330_000 },
    async () => {
      await sandboxes.create(c, ns, "quiet", { lifecycle: { idleTimeoutSeconds: 60 } });
      const ready = await waitForPhase(c, ns, "quiet", "Ready");
      const token = await tokenOf(c, ns, "quiet");
      const sandboxd = (path: string, init: RequestInit = {}) =>
        fetch(`http://${ready.status!.endpoint!}${path}`, {
          ...init,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          signal: AbortSignal.timeout(30_000),
        });
      // A quiet job: no output, no request, nothing through the provisioner for 100 s.
      const started = await sandboxd("/v1/processes", {
        method: "POST",
        body: JSON.stringify({ command: "sleep 100" }),
      });
      expect(started.status).toBe(201);
      const { pid } = (await started.json()) as { pid: number };
      await new Promise((r) => setTimeout(r, 85_000)); // past the 60 s idle timeout
      expect((await sandboxes.get(c, ns, "quiet")).status?.phase).toBe("Ready");
      const proc = (await (await sandboxd(`/v1/processes/${pid}`)).json()) as {
        exitCode?: number;
      };
      expect(proc.exitCode).toBeUndefined(); // still running: nothing killed it
      // Once the job has ended, the sandbox goes to sleep a full idle timeout later.
      const idle = await waitForPhase(c, ns, "quiet", "Suspended", 200_000);
      const cond = idle.status?.conditions?.find((x) => x.type === "Suspended");
      expect(cond?.reason).toBe("IdleTimeout");
      expect(
        Date.parse(cond!.lastTransitionTime) - Date.parse(ready.status!.readyAt!),
      ).toBeGreaterThanOrEqual(159_000);
    },
  );

  test.concurrent(
    "idle timeout suspends with the volume kept; reported activity resumes it",
    { timeout: 180_000 },
    async () => {
      await sandboxes.create(c, ns, "sleepy", { lifecycle: { idleTimeoutSeconds: 60 } });
      const ready = await waitForPhase(c, ns, "sleepy", "Ready");
      const token = await tokenOf(c, ns, "sleepy");
      await runCode(ready.status!.endpoint!, token, "open('/mnt/user-data/note','w').write('zz')");
      const idle = await waitForPhase(c, ns, "sleepy", "Suspended", 120_000);
      const cond = idle.status?.conditions?.find((x) => x.type === "Suspended");
      expect(cond?.reason).toBe("IdleTimeout");
      expect(
        Date.parse(cond!.lastTransitionTime) - Date.parse(ready.status!.readyAt!),
      ).toBeGreaterThanOrEqual(59_000);
      expect((await childrenOf(c, ns, "sleepy")).claims).toHaveLength(1);

      await sandboxes.reportActivity(c, ns, "sleepy");
      const awake = await waitForPhase(c, ns, "sleepy", "Ready");
      expect(
        (await runCode(awake.status!.endpoint!, token, "print(open('/mnt/user-data/note').read())"))
          .stdout,
      ).toBe("zz\n");
    },
  );
});

describe("invalid specs are refused by the API server, with a message", () => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ["an unknown language", { language: "cobol" }, /language.*Unsupported value: "cobol"/],
    [
      "a TTL below a minute",
      { lifecycle: { ttlSeconds: 5 } },
      /ttlSeconds.*should be greater than or equal to 60/,
    ],
    [
      "an idle timeout longer than the TTL",
      { lifecycle: { ttlSeconds: 120, idleTimeoutSeconds: 600 } },
      /idleTimeoutSeconds cannot be longer than lifecycle.ttlSeconds/,
    ],
    [
      "Allowlist without destinations",
      { network: { egress: "Allowlist" } },
      /network.allow or network.allowDomains lists destinations exactly when network.egress is Allowlist/,
    ],
    [
      "domains outside an Allowlist",
      { network: { egress: "Internet", allowDomains: ["pypi.org"] } },
      /network.allow or network.allowDomains lists destinations exactly when network.egress is Allowlist/,
    ],
    [
      "DNS asked for outside Allowlist (Deny has none, Internet has it already)",
      { network: { egress: "Deny", dns: true } },
      /network.dns applies to egress Allowlist only/,
    ],
    [
      "a malformed memory quantity",
      { resources: { memory: "lots" } },
      /spec.resources.memory: Invalid value: "lots"/,
    ],
    [
      "a bad environment variable name",
      { env: [{ name: "1BAD", value: "x" }] },
      /spec.env\[0\].name: Invalid value: "1BAD"/,
    ],
    ["an unknown field", { colour: "blue" }, /colour/],
  ];
  test.each(cases)("%s", async (_what, spec, message) => {
    const err = await sandboxes
      .create(c, ns, `bad-${Math.random().toString(36).slice(2, 7)}`, spec)
      .then(
        () => undefined,
        (e: { code?: number; body?: string }) => e,
      );
    // 422 Invalid from validation; 400 BadRequest from strict decoding of an unknown field.
    expect([400, 422]).toContain(err?.code);
    expect((JSON.parse(String(err?.body)) as { message: string }).message).toMatch(message);
  });

  test("spec.poolRef cannot be changed", async () => {
    await sandboxes.create(c, ns, "pinned", { poolRef: "a", lifecycle: { suspended: true } });
    const err = await sandboxes.patchSpec(c, ns, "pinned", { poolRef: "b" }).then(
      () => undefined,
      (e: { code?: number; body?: string }) => e,
    );
    expect(err?.code).toBe(422);
    expect((JSON.parse(String(err?.body)) as { message: string }).message).toMatch(
      /spec.poolRef cannot be changed/,
    );
  });
});

describe("examples/", () => {
  const dir = new URL("../../examples/", import.meta.url).pathname;
  const docs = readdirSync(dir)
    .filter((f) => f.endsWith(".yaml"))
    .flatMap((f) =>
      parseAllDocuments(readFileSync(join(dir, f), "utf8")).map((d) => [f, d.toJS()] as const),
    );

  test.each(docs)("%s is accepted by the API server as written", async (_file, doc) => {
    const plural = doc.kind === "SandboxPool" ? "sandboxpools" : "sandboxes";
    await c.custom.createNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: ns,
      plural,
      body: doc,
      dryRun: "All",
      fieldValidation: "Strict",
    });
  });

  test("examples/sandbox.yaml becomes Ready", { timeout: 120_000 }, async () => {
    const hello = docs.find(([f]) => f === "sandbox.yaml")![1];
    await c.custom.createNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: ns,
      plural: "sandboxes",
      body: hello,
    });
    const ready = await waitForPhase(c, ns, hello.metadata.name, "Ready");
    expect(
      (await runCode(ready.status!.endpoint!, await tokenOf(c, ns, "hello"), "print('hi')")).stdout,
    ).toBe("hi\n");
  });
});

describe("a sandbox whose sandboxd keeps dying", () => {
  let own: OperatorProcess;
  let space: string;
  beforeAll(async () => {
    space = await createNamespace(c, "op-fail");
    // One restart allowed, so the test sees the outcome after the kubelet's first back-offs.
    own = await startOperator({
      kubeconfig: inject("kubeconfig"),
      namespace: space,
      image: inject("clusterSandboxImage"),
      // A floor below any Node.js's needs, for the sandbox below (not a pool's bound).
      env: { SANDPIT_MAX_RECREATIONS: "1", SANDPIT_MIN_MEMORY: "4Mi" },
    });
  });
  afterAll(async () => {
    await own?.stop();
    if (space) await deleteNamespace(c, space);
  });

  test(
    "is Failed with the reason once its restarts are used up",
    { timeout: 260_000 },
    async () => {
      // 4Mi is too little for sandboxd's Node.js: it is OOM-killed at every start. (24Mi was
      // too, until sandboxd shed express; it now runs in 24Mi, and in 16Mi.)
      await sandboxes.create(c, space, "starved", { resources: { memory: "4Mi" } });
      // The kubelet's back-off between restarts (10 s, 20 s, 40 s...) sets the pace.
      const failed = await waitForPhase(c, space, "starved", "Failed", 240_000);
      const ready = failed.status?.conditions?.find((x) => x.type === "Ready");
      expect(ready?.reason).toBe("CrashLoopBackOff");
      expect(ready?.message).toMatch(/sandboxd exited \d+ times/);
    },
  );
});
