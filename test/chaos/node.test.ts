/**
 * Issue 18, chaos on the node's own components: containerd, the kubelet and etcd are each killed
 * with SIGKILL in the middle of a burst of creates, commands (plain and streamed), uploads and a
 * suspension through a provisioner and an operator, and started again the way `test/cluster/up` starts
 * them (`up` on a running cluster starts what is missing and leaves the rest alone: each test
 * checks that it restarted exactly the component killed). Then the node is rebooted
 * (`test/cluster/down`, `test/cluster/up`) with one sandbox running commands and an upload, one
 * suspended, and one made from a pool's warm pod (whose sandboxd, restarted by the reboot, the
 * operator must hand the sandbox's token again).
 *
 * After each fault:
 *  - one Sandbox per (tenant, user, thread) and no other; each with exactly one pod and one
 *    claim, and nothing the operator manages that no Sandbox owns (no orphan);
 *  - every file written before the fault is still there, byte for byte;
 *  - every command in flight answered exactly its full output and exit code, or failed: never a
 *    success with wrong or partial output; an upload is whole, or failed and left the whole file
 *    or none;
 *  - a suspension under way completes (or fails and is asked again), and the sandbox resumes
 *    with its files;
 *  - every sandbox serves commands again.
 *
 * What the reboot here is and is not (test/cluster/down then up, the machine itself stays up):
 *  - like a clean reboot: every component stops (SIGTERM, as a shutdown sends it), every pod's
 *    processes are killed, the volumes are unmounted and the pod network namespaces, bridge and
 *    iptables chains go; etcd's data, the images and the volumes' filesystems stay on disk, and
 *    `up` mounts the volumes again before the kubelet starts. The kubelet then finds pods bound
 *    to its node with no containers and makes them again, with new addresses.
 *  - unlike one: `down` also deletes the dead pod containers from containerd's records and the
 *    CNI address records, which a reboot would leave on disk (the kubelet makes new pod sandboxes
 *    either way, and `up` reclaims stale addresses); the kernel keeps its page cache, so this is
 *    a clean reboot, not a power cut (a write not yet synced is not lost here).
 *  - the operator and the provisioner, host processes here, would be pods on this node in a
 *    single-node cluster: they are ended with it (SIGKILL, after `down`, so that what the reboot
 *    cut in a sandbox failed because the sandbox went, not the provisioner) and started again
 *    once it is up, as their Deployments would be. The operator does not wait for that: it
 *    exits by itself while the API server is gone, having lost its Lease (by design: another
 *    replica may lead). Their SIGKILL on a running node is test/chaos/provisioner-kill.test.ts
 *    and test/operator/disruptive/resilience.test.ts.
 * The API server's own SIGKILL and restart is in resilience.test.ts.
 *
 * These tests kill the cluster's components: they run in the cluster-disruptive project, alone
 * (never by hand on a cluster others are testing on).
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterEach, beforeAll, describe, expect, inject, test } from "vitest";
import { GROUP, TOKEN_KEY_SECRET, VERSION } from "@sandpit/operator/api";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import type { SandboxInstance } from "@sandpit/sdk";
import {
  type Clients,
  type OperatorProcess,
  type Stack,
  childrenOf,
  clients,
  pools,
  ensureCrds,
  sandboxes,
  sandboxesByThread,
  startOperator,
  startProvisioner,
  startStack,
  waitFor,
} from "../cluster/harness.ts";

const run = promisify(execFile);
const UP = new URL("../cluster/up", import.meta.url).pathname;
const DOWN = new URL("../cluster/down", import.meta.url).pathname;
const KEY = "chaos-node-key-0123456789abcdefg";
const TENANT = "chaos";
const USER = "chaos-user";
const BEFORE = 3; // sandboxes made and written to before the fault
const DURING = 2; // sandboxes created during the burst
const UPLOAD_BYTES = 1024 * 1024;
const POOL = "chaos-pool";
/**
 * The provisioner reserves none of the pool's warm pods for its fast path (it would take the
 * one warm pod for itself on the first create naming the pool): the operator adopts it.
 */
const NO_RESERVATION = { SANDPIT_WARM_RESERVATION: "0" };
/** What `up` starts and records a PID for. */
const COMPONENTS = [
  "etcd",
  "kube-apiserver",
  "kube-controller-manager",
  "kube-scheduler",
  "hostpath-provisioner",
  "containerd",
  "coredns",
  "kubelet",
  "kube-proxy",
  "kube-router",
] as const;
type Component = (typeof COMPONENTS)[number];

let c: Clients;
let state: string;
/** What the running test started, stopped after it whatever happened. */
let stack: Stack | undefined;
let sdk: KubernetesProvider | undefined;
/** Started again after a reboot, stopped after the test before the rest. */
const restarted: { stop: () => Promise<void> }[] = [];
/** Whether an operator that exits is started again (see supervise). */
let supervised = false;
let operatorRestarts = 0;
let supervisorFailed: string | undefined;

/**
 * What the operator's Deployment does: an operator that exits is started again. It exits by
 * design when it could not renew its Lease within its renew deadline (10 s), which an API
 * server without etcd for that long refuses it: another replica may lead by then.
 */
function supervise(o: OperatorProcess, ns: string) {
  supervised = true;
  operatorRestarts = 0;
  supervisorFailed = undefined;
  const keep = (p: OperatorProcess) =>
    p.proc.once("exit", () => {
      if (!supervised) return;
      operatorRestarts++;
      void startOperator({
        kubeconfig: inject("kubeconfig"),
        namespace: ns,
        image: inject("clusterSandboxImage"),
      }).then(
        (next) => {
          if (!supervised) return void next.stop(); // the test ended meanwhile
          restarted.push(next);
          keep(next);
        },
        (err: unknown) => (supervisorFailed = String(err)),
      );
    });
  keep(o);
}

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  state = dirname(inject("kubeconfig"));
});

afterEach(async () => {
  supervised = false;
  for (const p of restarted.splice(0).reverse()) await p.stop().catch(() => undefined);
  await sdk?.close().catch(() => undefined);
  await stack?.stop();
  sdk = undefined;
  stack = undefined;
});

async function start(
  prefix: string,
  beforeProvisioner?: (c: Clients, ns: string) => Promise<void>,
) {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix,
    keys: [{ key: KEY, tenant: TENANT, maxSandboxes: 50 }],
    ...(beforeProvisioner ? { beforeProvisioner, env: NO_RESERVATION } : {}),
  });
  sdk = new KubernetesProvider({
    provisionerUrl: stack.prov.url,
    apiKey: KEY,
    readyTimeoutMs: 180_000,
    requestTimeoutMs: 60_000,
  });
  return { stack, sdk };
}

// --- the cluster's components, as `up` records them ------------------------------------------

const pidOf = (name: Component): number | undefined => {
  try {
    return Number(readFileSync(join(state, "pids", name), "utf8"));
  } catch {
    return undefined;
  }
};
const alive = (pid: number | undefined) => {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const pids = () => Object.fromEntries(COMPONENTS.map((n) => [n, pidOf(n)]));

/** SIGKILL to the PID `up` recorded for `name`, and the wait until it is gone. */
async function kill9(name: Component): Promise<number> {
  const pid = pidOf(name);
  expect(alive(pid), `${name} running before the fault`).toBe(true);
  process.kill(pid!, "SIGKILL");
  await waitFor(`${name} (pid ${pid}) to die`, 30_000, async () => !alive(pid), 100);
  return pid!;
}

const up = async () =>
  run(UP, [], { timeout: 300_000, maxBuffer: 16 * 1024 * 1024 }).catch((err: unknown) => {
    const e = err as { stderr?: string; message: string };
    throw new Error(`test/cluster/up failed: ${e.message}\n${e.stderr ?? ""}`);
  });
const down = async () =>
  run(DOWN, [], { timeout: 180_000, maxBuffer: 16 * 1024 * 1024 }).catch((err: unknown) => {
    const e = err as { stderr?: string; message: string };
    throw new Error(`test/cluster/down failed: ${e.message}\n${e.stderr ?? ""}`);
  });

// --- what the sandboxes are given and must answer ---------------------------------------------

const create = (sdk: KubernetesProvider, thread: string) =>
  sdk.create({ language: "python", threadId: thread, userId: USER });
/** Deterministic content, different per sandbox and purpose. */
const content = (thread: string, what: string, bytes = 64 * 1024) =>
  Buffer.alloc(bytes, `${what} of ${thread} `).toString();

type Outcome<T> = { ok: true; value: T } | { ok: false; error: string };
const settle = <T>(p: Promise<T>): Promise<Outcome<T>> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (err: unknown) => ({ ok: false as const, error: String(err) }),
  );

/** A command that records its start, takes a while, and answers on both streams. */
const command = (i: number, n: number, sleep: number) =>
  `echo start ${i}/${n}; echo ${i}/${n} >> /mnt/user-data/started; sleep ${sleep}; ` +
  `echo end ${i}/${n}; echo err ${i}/${n} >&2; exit ${10 + n}`;
const answer = (i: number, n: number) => ({
  exitCode: 10 + n,
  stdout: `start ${i}/${n}\nend ${i}/${n}\n`,
  stderr: `err ${i}/${n}\n`,
});

/** Streamed in 16 pieces `everyMs` apart, so the fault finds it under way. */
async function* slowly(text: string, everyMs = 300) {
  const bytes = Buffer.from(text);
  const piece = bytes.length / 16;
  for (let k = 0; k < 16; k++) {
    yield bytes.subarray(k * piece, (k + 1) * piece);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** How many commands have recorded their start in a sandbox. */
const started = async (s: SandboxInstance) =>
  (await s.filesystem.exists("/mnt/user-data/started"))
    ? (await s.filesystem.read("/mnt/user-data/started")).split("\n").filter(Boolean).length
    : 0;

interface CommandResult {
  /** When it ended (performance.now()). */
  endedAt: number;
  i: number;
  n: number;
  stream: boolean;
  streamed: () => string;
  outcome: Outcome<{ exitCode: number; stdout: string; stderr: string }>;
}

/**
 * Commands in `boxes`, the even ones streamed: the k-th of each, numbered `first + k`, sleeps
 * `sleeps[k]` seconds.
 */
const commands = (boxes: SandboxInstance[], sleeps: number[], first = 0) =>
  boxes.flatMap((s, i) =>
    sleeps.map((sleep, k) => {
      const n = first + k;
      let streamed = "";
      const stream = n % 2 === 0;
      return settle(
        s.commands.run(command(i, n, sleep), {
          timeoutMs: 120_000,
          ...(stream ? { onStdout: (d: string) => (streamed += d) } : {}),
        }),
      ).then((outcome): CommandResult => ({
        endedAt: performance.now(),
        i,
        n,
        stream,
        streamed: () => streamed,
        outcome,
      }));
    }),
  );

/** Each command answered exactly its own full output, or failed: the wrong ones, described. */
function wrongAnswers(results: CommandResult[]): string[] {
  const wrong: string[] = [];
  for (const r of results) {
    if (!r.outcome.ok) continue;
    const got = r.outcome.value;
    const w = answer(r.i, r.n);
    if (got.exitCode !== w.exitCode || got.stdout !== w.stdout || got.stderr !== w.stderr)
      wrong.push(`${r.i}/${r.n} answered ${JSON.stringify(got)} as a success`);
    if (r.stream && r.streamed() !== w.stdout)
      wrong.push(`${r.i}/${r.n} streamed ${JSON.stringify(r.streamed())}`);
  }
  return wrong;
}

/**
 * The invariants after a fault, once every Sandbox is Ready again: one Sandbox per thread, the
 * ones in `ids`; each with one pod and one claim; nothing managed that no Sandbox owns.
 */
async function noOrphanNoDuplicate(ns: string, ids: Map<string, string>) {
  await waitFor(
    "every Sandbox Ready",
    180_000,
    async () => {
      const all = await sandboxes.list(c, ns);
      return all.length === ids.size && all.every((s) => s.status?.phase === "Ready");
    },
    500,
  );
  expect(await sandboxesByThread(c, ns)).toEqual(
    Object.fromEntries([...ids].map(([t, id]) => [`${TENANT}/${USER}/${t}`, [id]])),
  );
  for (const id of ids.values()) {
    const ch = await childrenOf(c, ns, id);
    expect({ id, pods: ch.pods.length, claims: ch.claims.length }).toEqual({
      id,
      pods: 1,
      claims: 1,
    });
  }
  // Warm pods (and their claims) belong to their pool.
  const poolUids = (
    (await c.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: "sandboxpools",
    })) as { items: { metadata: { uid: string } }[] }
  ).items.map((p) => p.metadata.uid);
  const objects = await sandboxes.list(c, ns);
  const owned = new Set([...objects.map((s) => s.metadata.uid), ...poolUids]);
  const managed = "app.kubernetes.io/managed-by=sandpit-operator";
  const [pods, claims, secrets] = await Promise.all([
    c.core.listNamespacedPod({ namespace: ns, labelSelector: managed }),
    c.core.listNamespacedPersistentVolumeClaim({ namespace: ns, labelSelector: managed }),
    c.core.listNamespacedSecret({ namespace: ns, labelSelector: managed }),
  ]);
  const orphans = [
    ...pods.items.map((o) => ["pod", o] as const),
    ...claims.items.map((o) => ["claim", o] as const),
    // The namespace's token key is the operator's own, no sandbox's.
    ...secrets.items
      .filter((o) => o.metadata?.name !== TOKEN_KEY_SECRET)
      .map((o) => ["secret", o] as const),
  ]
    .filter(([, o]) => !owned.has(o.metadata?.ownerReferences?.[0]?.uid))
    .map(([kind, o]) => `${kind} ${o.metadata?.name}`);
  expect(orphans).toEqual([]);
}

/**
 * One component killed with SIGKILL in the middle of a burst and restarted by `up` `outage` ms
 * later. Some calls are in flight at the kill (commands of 2 s and 10 s, the long ones
 * outliving the restart; slow uploads; creates; a suspension, its pod being deleted), others
 * are made while the component is down.
 * The sandboxes' processes and the data plane (provisioner to sandboxd) go through none of
 * these components, so every command and upload must succeed; a create may fail while the
 * component is down (a client retries it: the same thread, so the same Sandbox).
 */
async function burstThrough(component: Component, outage: number) {
  const t0 = performance.now();
  const { stack, sdk } = await start(`chaos-${component}`);
  supervise(stack.operator, stack.ns);
  const thread = (i: number) => `${component}-${i}`;

  const [paused, ...before] = await Promise.all(
    Array.from({ length: BEFORE + 1 }, (_, i) => create(sdk, i === 0 ? "paused" : thread(i - 1))),
  );
  await Promise.all(
    [...before, paused!].map((s, i) =>
      s.filesystem.write(
        "/mnt/user-data/before.txt",
        content(i < BEFORE ? thread(i) : "paused", "before"),
      ),
    ),
  );

  // In flight at the kill.
  const inFlight = commands(before, [2, 10]);
  const upload = (path: string, what: string, body: (text: string) => AsyncIterable<Uint8Array>) =>
    before.map((s, i) =>
      settle(s.filesystem.writeStream(path, body(content(thread(i), what, UPLOAD_BYTES)))).then(
        (outcome) => ({ i, path, what, outcome }),
      ),
    );
  const uploads = upload("/mnt/user-data/upload.txt", "upload", (text) => slowly(text));
  const creates = Array.from({ length: DURING }, (_, k) => {
    const i = BEFORE + k;
    return settle(create(sdk, thread(i))).then((outcome) => ({ i, outcome }));
  });
  await waitFor(
    "the commands to start in every sandbox",
    60_000,
    async () => (await Promise.all(before.map(started))).every((n) => n >= 2),
    200,
  );

  // And a sandbox being suspended: its pod is deleted as the component goes.
  const pausing = settle(paused!.pause());
  await waitFor(
    "the suspension to begin",
    30_000,
    async () =>
      (
        (await sandboxes.get(c, stack.ns, paused!.sandboxId)).spec.lifecycle as {
          suspended?: boolean;
        }
      )?.suspended === true,
    100,
  );

  const pidsBefore = pids();
  const killedAt = performance.now();
  const killed = await kill9(component);
  // Made while it is down: a command in each sandbox, an upload in each, one create.
  const whileDown = commands(before, [1], 2);
  const uploadsWhileDown = upload(
    "/mnt/user-data/upload-down.txt",
    "upload down",
    async function* (text) {
      yield Buffer.from(text);
    },
  );
  const i = BEFORE + DURING;
  creates.push(settle(create(sdk, thread(i))).then((outcome) => ({ i, outcome })));
  await new Promise((r) => setTimeout(r, outage));
  const tUp = performance.now();
  await up();
  const upSeconds = (performance.now() - tUp) / 1000;
  // up started the one that was missing, and left every other component alone.
  const pidsAfter = pids();
  expect(alive(pidsAfter[component]), `${component} running again`).toBe(true);
  expect(pidsAfter[component]).not.toBe(killed);
  expect({ ...pidsAfter, [component]: 0 }).toEqual({ ...pidsBefore, [component]: 0 });

  const commandResults = [...(await Promise.all(inFlight)), ...(await Promise.all(whileDown))];
  const uploadResults = [...(await Promise.all(uploads)), ...(await Promise.all(uploadsWhileDown))];
  const createResults = await Promise.all(creates);

  // The fault found commands under way (the 10 s ones), or this test proves nothing.
  expect(
    commandResults.filter((r) => r.n === 1).every((r) => r.endedAt > killedAt),
    "the 10 s commands still running at the kill",
  ).toBe(true);
  // Every command answered exactly its own full output (none failed), every upload is whole.
  expect(wrongAnswers(commandResults)).toEqual([]);
  expect(
    commandResults
      .filter((r) => !r.outcome.ok)
      .map((r) => `${r.i}/${r.n}: ${r.outcome.ok || r.outcome.error}`),
  ).toEqual([]);
  for (const u of uploadResults) {
    expect(u.outcome, `upload to ${u.i} ${u.path}`).toEqual({ ok: true });
    expect(await before[u.i]!.filesystem.read(u.path)).toBe(
      content(thread(u.i), u.what, UPLOAD_BYTES),
    );
  }

  // A create the fault cut is retried, as a client would: the same thread, so the same Sandbox.
  const ids = new Map<string, string>();
  before.forEach((s, i) => ids.set(thread(i), s.sandboxId));
  const after: SandboxInstance[] = [];
  for (const r of createResults) {
    const s = r.outcome.ok ? r.outcome.value : await create(sdk, thread(r.i));
    ids.set(thread(r.i), s.sandboxId);
    after.push(s);
  }
  // The suspension the fault found under way completes (a failed one is asked again), and
  // the sandbox resumes with its files.
  const pauseOutcome = await pausing;
  if (!pauseOutcome.ok) await paused!.pause();
  expect((await sandboxes.get(c, stack.ns, paused!.sandboxId)).status?.phase).toBe("Suspended");
  expect((await childrenOf(c, stack.ns, paused!.sandboxId)).pods).toEqual([]);
  const resumed = await sdk.resume(paused!.sandboxId);
  expect(await resumed.filesystem.read("/mnt/user-data/before.txt")).toBe(
    content("paused", "before"),
  );
  ids.set("paused", paused!.sandboxId);
  await noOrphanNoDuplicate(stack.ns, ids);

  for (const [i, s] of before.entries())
    expect(await s.filesystem.read("/mnt/user-data/before.txt")).toBe(content(thread(i), "before"));
  // Every sandbox, old and new, runs a command again.
  for (const s of [...before, ...after]) {
    const r = await s.commands.run("echo alive", { timeoutMs: 60_000 });
    expect({ exitCode: r.exitCode, stdout: r.stdout }).toEqual({ exitCode: 0, stdout: "alive\n" });
  }
  expect(supervisorFailed, "the operator started again").toBeUndefined();
  const failed = createResults.filter((x) => !x.outcome.ok);
  console.log(
    `${component} SIGKILLed: up in ${upSeconds.toFixed(1)} s; ${commandResults.length} commands ` +
      `and ${uploadResults.length} uploads all answered; ${failed.length} of ` +
      `${createResults.length} creates failed and were retried ` +
      `(${failed.map((x) => (x.outcome as { error: string }).error.slice(0, 160)).join(" | ")}); ` +
      `the suspension under way ${pauseOutcome.ok ? "completed" : `failed (${pauseOutcome.error.slice(0, 160)}) and was asked again`}; ` +
      `the operator started again ${operatorRestarts} times; ` +
      `${((performance.now() - t0) / 1000).toFixed(1)} s in all`,
  );
}

describe("the node's components killed with SIGKILL in a burst", () => {
  test("containerd", { timeout: 300_000 }, async () => {
    await burstThrough("containerd", 5_000);
  });

  test("the kubelet", { timeout: 300_000 }, async () => {
    await burstThrough("kubelet", 5_000);
  });

  test("etcd", { timeout: 300_000 }, async () => {
    await burstThrough("etcd", 5_000);
  });
});

describe("a node reboot: test/cluster/down, then up", () => {
  test(
    "running, suspended and pooled sandboxes come back with their files; what the reboot cut is an error",
    { timeout: 420_000 },
    async () => {
      const t0 = performance.now();
      // A pool with one warm pod: a third sandbox, running too, is made from it (an adopted pod,
      // whose sandboxd the operator must hand its token again once the reboot restarted it).
      const { stack, sdk } = await start("chaos-reboot", async (c, ns) => {
        await pools.create(c, ns, POOL, { warm: 1, maxActive: 10, template: {} });
        await waitFor(
          "the warm pod",
          120_000,
          async () => ((await pools.get(c, ns, POOL)).status?.warmReady ?? 0) >= 1,
          500,
        );
      });
      const [running, suspended, warm] = await Promise.all([
        create(sdk, "reboot-running"),
        create(sdk, "reboot-suspended"),
        sdk.create({ language: "python", threadId: "reboot-warm", userId: USER, template: POOL }),
      ]);
      const warmPod = (await sandboxes.get(c, stack.ns, warm.sandboxId)).status?.podName;
      expect(warmPod, "the pooled sandbox adopted a warm pod").not.toBe(warm.sandboxId);
      const file = (id: string) => content(id, "before", 512 * 1024);
      for (const s of [running, suspended, warm]) {
        await s.filesystem.write("/mnt/user-data/before.txt", file(s.sandboxId));
        await s.filesystem.write("/mnt/user-data/bytes.bin", new Uint8Array([0, 1, 2]));
        await s.filesystem.write("/mnt/user-data/id.txt", s.sandboxId);
      }
      const claimUid = async (id: string) =>
        (await childrenOf(c, stack.ns, id)).claims.map((p) => p.metadata?.uid);
      const claimsBefore = {
        running: await claimUid(running.sandboxId),
        suspended: await claimUid(suspended.sandboxId),
        warm: await claimUid(warm.sandboxId),
      };
      await suspended.pause();
      await waitFor(
        "the suspended sandbox's pod to go",
        60_000,
        async () => (await childrenOf(c, stack.ns, suspended.sandboxId)).pods.length === 0,
        200,
      );

      // In flight across the reboot: two commands that would take 60 s (one streamed), and an
      // upload that would take 32 s.
      const cut = commands([running], [60, 60]);
      const uploadText = content(running.sandboxId, "upload", UPLOAD_BYTES);
      const upload = settle(
        running.filesystem.writeStream("/mnt/user-data/upload.txt", slowly(uploadText, 2_000)),
      );
      await waitFor("the commands to start", 30_000, async () => (await started(running)) >= 2);

      const rebootAt = new Date(Date.now() - 1000);
      const tDown = performance.now();
      await down();
      const downSeconds = (performance.now() - tDown) / 1000;
      // In a single-node cluster the operator and the provisioner are pods on this node too:
      // ended with it (last, so that what the reboot cut in the sandbox failed because the
      // sandbox went, not the provisioner), and started again once it is up, as their
      // Deployments would be. (The operator has exited by itself already: it lost its Lease
      // while the API server was gone, and exits then by design.)
      await stack.prov.kill9();
      await stack.operator.kill9();
      const tUp = performance.now();
      await up();
      const upSeconds = (performance.now() - tUp) / 1000;
      for (const name of COMPONENTS) expect(alive(pidOf(name)), `${name} after up`).toBe(true);

      // What the reboot cut: each an error, never a success; the upload left all or nothing.
      const results = await Promise.all(cut);
      expect(wrongAnswers(results)).toEqual([]);
      expect(
        results.map((r) => r.outcome.ok),
        "commands cut by the reboot",
      ).toEqual([false, false]);
      const uploaded = await upload;
      expect(uploaded.ok, "the upload cut by the reboot").toBe(false);

      const operator = await startOperator({
        kubeconfig: inject("kubeconfig"),
        namespace: stack.ns,
        image: inject("clusterSandboxImage"),
      });
      restarted.push(operator);
      const prov = await startProvisioner({
        kubeconfig: inject("kubeconfig"),
        namespace: stack.ns,
        keys: [{ key: KEY, tenant: TENANT, maxSandboxes: 50 }],
        env: NO_RESERVATION,
      });
      restarted.push(prov);
      const sdk2 = new KubernetesProvider({
        provisionerUrl: prov.url,
        apiKey: KEY,
        readyTimeoutMs: 180_000,
        requestTimeoutMs: 60_000,
      });
      restarted.push({ stop: () => sdk2.close() });

      // The running one comes back by itself, on a pod sandbox the kubelet made again. Until
      // the kubelet has reported that, the API still shows the pod as it was before the reboot
      // (Ready, at its old address), and calls to it fail: an error, never a wrong answer (nor
      // one from another sandbox that the old address might be given to now).
      const refusals: string[] = [];
      const wrong: string[] = [];
      const back = await waitFor(
        "the running sandbox's pod made again, Ready, and answering",
        180_000,
        async () => {
          const pods = (await childrenOf(c, stack.ns, running.sandboxId)).pods;
          const startedAt = pods[0]?.status?.containerStatuses?.map(
            (s) => s.state?.running?.startedAt,
          );
          if (
            pods.length !== 1 ||
            !startedAt?.length ||
            !startedAt.every((t) => t && new Date(t) >= rebootAt)
          )
            return false;
          if ((await sandboxes.get(c, stack.ns, running.sandboxId)).status?.phase !== "Ready")
            return false;
          const s = await sdk2.resume(running.sandboxId);
          const r = await settle(
            s.commands.run("cat /mnt/user-data/id.txt", { timeoutMs: 30_000 }),
          );
          if (!r.ok) {
            refusals.push(r.error.slice(0, 120));
            return false;
          }
          // (waitFor takes a throw for "not yet": a wrong answer is kept and asserted after.)
          if (r.value.exitCode !== 0 || r.value.stdout !== running.sandboxId) {
            wrong.push(JSON.stringify(r.value));
            return false;
          }
          return s;
        },
        500,
      );
      expect(wrong, "answers while the running sandbox came back").toEqual([]);
      const backSeconds = (performance.now() - tUp) / 1000;
      // The suspended one stayed suspended, and resumes with its files.
      expect((await sandboxes.get(c, stack.ns, suspended.sandboxId)).status?.phase).toBe(
        "Suspended",
      );
      const resumed = await sdk2.resume(suspended.sandboxId);
      // The pooled one comes back by itself too, on the pod it adopted.
      const warmBack = await waitFor(
        "the pooled sandbox answering again",
        120_000,
        async () => {
          const s = await sdk2.resume(warm.sandboxId);
          const r = await settle(
            s.commands.run("cat /mnt/user-data/id.txt", { timeoutMs: 30_000 }),
          );
          if (!r.ok) return false;
          if (r.value.exitCode !== 0 || r.value.stdout !== warm.sandboxId) {
            wrong.push(JSON.stringify(r.value));
            return false;
          }
          return s;
        },
        500,
      );
      expect(wrong, "answers while the pooled sandbox came back").toEqual([]);
      expect((await sandboxes.get(c, stack.ns, warm.sandboxId)).status?.podName).toBe(warmPod);
      for (const s of [back, resumed, warmBack]) {
        expect(await s.filesystem.read("/mnt/user-data/before.txt")).toBe(file(s.sandboxId));
        expect([...(await s.filesystem.readBytes("/mnt/user-data/bytes.bin"))]).toEqual([0, 1, 2]);
        const r = await s.commands.run("echo alive", { timeoutMs: 60_000 });
        expect({ exitCode: r.exitCode, stdout: r.stdout }).toEqual({
          exitCode: 0,
          stdout: "alive\n",
        });
      }
      if (await back.filesystem.exists("/mnt/user-data/upload.txt"))
        expect(await back.filesystem.read("/mnt/user-data/upload.txt")).toBe(uploadText);
      // The same volumes (not new, empty ones), and no orphan or duplicate.
      expect({
        running: await claimUid(running.sandboxId),
        suspended: await claimUid(suspended.sandboxId),
        warm: await claimUid(warm.sandboxId),
      }).toEqual(claimsBefore);
      await noOrphanNoDuplicate(
        stack.ns,
        new Map([
          ["reboot-running", running.sandboxId],
          ["reboot-suspended", suspended.sandboxId],
          ["reboot-warm", warm.sandboxId],
        ]),
      );
      // A create after the reboot works too.
      const fresh = await create(sdk2, "reboot-after");
      expect((await fresh.commands.run("echo new", { timeoutMs: 60_000 })).stdout).toBe("new\n");
      console.log(
        `reboot: down in ${downSeconds.toFixed(1)} s, up in ${upSeconds.toFixed(1)} s, the ` +
          `running sandbox answering ${backSeconds.toFixed(1)} s after up began ` +
          `(refused before: ${refusals.join(" | ") || "none"}); cut: ` +
          [...results.map((r) => r.outcome), uploaded]
            .map((o) => (o as { error?: string }).error?.slice(0, 160))
            .join(" | ") +
          `; ${((performance.now() - t0) / 1000).toFixed(1)} s in all`,
      );
    },
  );
});
