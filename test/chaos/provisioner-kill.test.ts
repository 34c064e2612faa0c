/**
 * Issue 18, chaos: two provisioner replicas serve a burst of creates, commands (plain and
 * streamed) and uploads through the SDK's kubernetes provider; one replica is killed with
 * SIGKILL in the middle of it and started again, and every client whose call failed retries
 * against the restarted replica. Then:
 *  - one Sandbox per (tenant, user, thread), and none that is no thread's (no orphan);
 *  - every file written before the fault is still there, byte for byte;
 *  - every command interrupted by the kill was reported as an error, never as a success: a
 *    command either answered with exactly its full output and exit code, or failed;
 *  - an upload interrupted by the kill left the whole file or none, never part of it;
 *  - the surviving replica served its half of the burst without an error.
 * test/provisioner/faults.test.ts kills a replica during creates alone; this one kills it with
 * data-plane traffic in flight on both replicas.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import type { SandboxInstance } from "@sandpit/sdk";
import {
  type Clients,
  type OperatorProcess,
  type ProvisionerProcess,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  sandboxesByThread,
  startOperator,
  startProvisioner,
  waitFor,
} from "../cluster/harness.ts";

const KEY = "chaos-key-0123456789abcdefghij";
const USER = "chaos-user";
const BEFORE = 8; // sandboxes made and written to before the fault
const DURING = 8; // sandboxes created during the burst
const COMMANDS_PER_SANDBOX = 4;
const UPLOAD_BYTES = 4 * 1024 * 1024;

let c: Clients;
let ns: string;
let operator: OperatorProcess;
const replicas: ProvisionerProcess[] = [];
const providers: KubernetesProvider[] = [];

async function replica(): Promise<{ p: ProvisionerProcess; sdk: KubernetesProvider }> {
  const p = await startProvisioner({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    keys: [{ key: KEY, tenant: "chaos", maxSandboxes: 100 }],
  });
  replicas.push(p);
  const sdk = new KubernetesProvider({
    provisionerUrl: p.url,
    apiKey: KEY,
    readyTimeoutMs: 180_000,
    requestTimeoutMs: 60_000,
  });
  providers.push(sdk);
  return { p, sdk };
}

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  ns = await createNamespace(c, "chaos");
  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
});

afterAll(async () => {
  for (const sdk of providers) await sdk.close().catch(() => undefined);
  for (const p of replicas) await p.stop();
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

const thread = (i: number) => `chaos-${String(i).padStart(2, "0")}`;
const create = (sdk: KubernetesProvider, i: number) =>
  sdk.create({ language: "python", threadId: thread(i), userId: USER });
/** Deterministic content of a sandbox's file, different per sandbox. */
const content = (i: number, what: string, bytes = 64 * 1024) =>
  Buffer.alloc(bytes, `${what} of ${thread(i)} `).toString();

/** How a call ended: what it answered, or that it failed. */
type Outcome<T> = { ok: true; value: T } | { ok: false; error: string };
const settle = <T>(p: Promise<T>): Promise<Outcome<T>> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (err: unknown) => ({ ok: false as const, error: String(err) }),
  );

describe("a provisioner replica killed and restarted in a burst", () => {
  test(
    "no orphan, no duplicate, files kept, every interrupted call an error",
    { timeout: 600_000 },
    async () => {
      const a = await replica();
      const b = await replica();
      const via = (i: number) => (i % 2 === 0 ? a : b);

      // Before the fault: sandboxes through both replicas, each with a file.
      const before = await Promise.all(
        Array.from({ length: BEFORE }, (_, i) => create(via(i).sdk, i)),
      );
      await Promise.all(
        before.map((s, i) => s.filesystem.write(`/mnt/user-data/before.txt`, content(i, "before"))),
      );
      // The same sandboxes seen through the other replica (their handles on it).
      const other = await Promise.all(
        before.map((s, i) => (i % 2 === 0 ? b : a).sdk.resume(s.sandboxId)),
      );
      const throughA = before.map((s, i) => (i % 2 === 0 ? s : other[i]!));
      const throughB = before.map((s, i) => (i % 2 === 0 ? other[i]! : s));

      // The burst, on both replicas at once: creates, commands that take a while (half of them
      // streamed), uploads.
      const command = (i: number, n: number) =>
        `echo start ${i}/${n}; echo ${i}/${n} >> /mnt/user-data/started; sleep 3; ` +
        `echo end ${i}/${n}; echo err ${i}/${n} >&2; exit ${10 + n}`;
      const want = (i: number, n: number) => ({
        exitCode: 10 + n,
        stdout: `start ${i}/${n}\nend ${i}/${n}\n`,
        stderr: `err ${i}/${n}\n`,
      });
      const runs = (side: "A" | "B", boxes: SandboxInstance[]) =>
        boxes.flatMap((s, i) =>
          Array.from({ length: COMMANDS_PER_SANDBOX }, (_, n) => {
            let streamed = "";
            const stream = n % 2 === 0;
            return settle(
              s.commands.run(command(i, n), {
                timeoutMs: 60_000,
                ...(stream ? { onStdout: (d: string) => (streamed += d) } : {}),
              }),
            ).then((outcome) => ({ side, i, n, stream, streamed: () => streamed, outcome }));
          }),
        );
      // Streamed in 16 pieces over about 5 s, so the kill finds them under way.
      async function* slowly(text: string) {
        const bytes = Buffer.from(text);
        const piece = bytes.length / 16;
        for (let k = 0; k < 16; k++) {
          yield bytes.subarray(k * piece, (k + 1) * piece);
          await new Promise((r) => setTimeout(r, 300));
        }
      }
      const uploads = (side: "A" | "B", boxes: SandboxInstance[]) =>
        boxes.map((s, i) =>
          settle(
            s.filesystem.writeStream(
              `/mnt/user-data/upload-${side}.txt`,
              slowly(content(i, `upload ${side}`, UPLOAD_BYTES)),
            ),
          ).then((outcome) => ({ side, i, outcome })),
        );
      const creates = Array.from({ length: DURING }, (_, k) => {
        const i = BEFORE + k;
        return settle(create(via(i).sdk, i)).then((outcome) => ({
          i,
          side: i % 2 === 0 ? "A" : "B",
          outcome,
        }));
      });
      const commands = [...runs("A", throughA), ...runs("B", throughB)];
      const uploaded = [...uploads("A", throughA), ...uploads("B", throughB)];

      // The kill, once commands are running in the sandboxes (each records its start).
      await waitFor(
        "commands running in every sandbox made before the fault",
        120_000,
        async () => {
          const counts = await Promise.all(
            throughB.map(async (s) =>
              (await s.filesystem.exists("/mnt/user-data/started"))
                ? (await s.filesystem.read("/mnt/user-data/started")).split("\n").filter(Boolean)
                    .length
                : 0,
            ),
          );
          return counts.every((n) => n >= 1) ? true : undefined;
        },
        200,
      );
      await a.p.kill9();
      const restarted = await replica();

      const commandResults = await Promise.all(commands);
      const uploadResults = await Promise.all(uploaded);
      const createResults = await Promise.all(creates);

      // Every command: exactly its own full answer, or an error. Never a partial success.
      const wrong: string[] = [];
      let interrupted = 0;
      for (const r of commandResults) {
        if (!r.outcome.ok) {
          if (r.side === "B") wrong.push(`B ${r.i}/${r.n} failed: ${r.outcome.error}`);
          interrupted++;
          continue;
        }
        const got = r.outcome.value;
        const w = want(r.i, r.n);
        if (got.exitCode !== w.exitCode || got.stdout !== w.stdout || got.stderr !== w.stderr)
          wrong.push(`${r.side} ${r.i}/${r.n} answered ${JSON.stringify(got)} as a success`);
        if (r.stream && r.streamed() !== w.stdout)
          wrong.push(`${r.side} ${r.i}/${r.n} streamed ${JSON.stringify(r.streamed())}`);
      }
      expect(wrong).toEqual([]);
      // The kill must have cut commands in flight, or this test proves nothing.
      expect(interrupted, "commands interrupted by the kill").toBeGreaterThan(0);

      // Uploads: those through B succeeded; each one through A is whole, or was an error and
      // left the whole file or none.
      for (const u of uploadResults) {
        if (u.side === "B") expect(u.outcome, `upload through B to ${u.i}`).toEqual({ ok: true });
        const path = `/mnt/user-data/upload-${u.side}.txt`;
        const s = throughB[u.i]!;
        const full = content(u.i, `upload ${u.side}`, UPLOAD_BYTES);
        if (u.outcome.ok) expect(await s.filesystem.read(path)).toBe(full);
        else if (await s.filesystem.exists(path)) expect(await s.filesystem.read(path)).toBe(full);
      }

      // Creates cut by the kill are retried on the restarted replica, as a client would.
      const ids = new Map<string, string>();
      for (const r of createResults) {
        if (r.outcome.ok) ids.set(thread(r.i), r.outcome.value.sandboxId);
        else {
          expect(r.side, `a create through B failed: ${r.outcome.error}`).toBe("A");
          ids.set(thread(r.i), (await create(restarted.sdk, r.i)).sandboxId);
        }
      }
      before.forEach((s, i) => ids.set(thread(i), s.sandboxId));

      // One Sandbox per (tenant, user, thread), and no other.
      expect(await sandboxesByThread(c, ns)).toEqual(
        Object.fromEntries([...ids].map(([t, id]) => [`chaos/${USER}/${t}`, [id]])),
      );

      // Every file written before the fault, through the restarted replica and the survivor.
      for (const [i, s] of before.entries()) {
        const again = await restarted.sdk.resume(s.sandboxId);
        expect(await again.filesystem.read("/mnt/user-data/before.txt")).toBe(content(i, "before"));
        expect(await throughB[i]!.filesystem.read("/mnt/user-data/before.txt")).toBe(
          content(i, "before"),
        );
      }
      const errors = (p: ProvisionerProcess) =>
        p
          .logs()
          .split("\n")
          .filter((l) => /"level":(50|60)\b/.test(l));
      expect(errors(b.p)).toEqual([]);
      expect(errors(restarted.p)).toEqual([]);
      console.log(
        `chaos: ${interrupted} of ${commandResults.length} commands interrupted, ` +
          `${uploadResults.filter((u) => !u.outcome.ok).length} uploads, ` +
          `${createResults.filter((r) => !r.outcome.ok).length} creates`,
      );
    },
  );
});
