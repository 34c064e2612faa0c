/**
 * The provisioner under faults, as real processes against the real cluster and operator: a
 * replica killed with SIGKILL in the middle of concurrent creates, whose clients retry against a
 * fresh replica, loses nothing and duplicates nothing; two replicas answering creates for one
 * thread at the same time hand out one sandbox. Both hold because the provisioner keeps no state
 * of its own: a thread's Sandbox has a name derived from (tenant, user, thread).
 */
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type OperatorProcess,
  type ProvisionerProcess,
  type SandboxObject,
  clients,
  createNamespace,
  deleteNamespace,
  ensureCrds,
  sandboxes,
  startOperator,
  startProvisioner,
  waitFor,
} from "../cluster/harness.ts";

const KEY = "faults-key-0123456789abcdefgh";
const TENANT = "faults";
const THREAD_LABEL = "sandpit.dev/thread";
const USER_LABEL = "sandpit.dev/user";
const KILL_USER = "u-kill";
const REPLICAS_USER = "u-replicas";

let c: Clients;
let ns: string;
let operator: OperatorProcess;
const started: ProvisionerProcess[] = [];

beforeAll(async () => {
  c = clients(inject("kubeconfig"));
  await ensureCrds(c);
  ns = await createNamespace(c, "faults");
  operator = await startOperator({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    image: inject("clusterSandboxImage"),
  });
});

afterAll(async () => {
  for (const p of started) await p.stop();
  await operator?.stop();
  if (ns) await deleteNamespace(c, ns);
});

/** A provisioner on the test namespace with the shared key; stopped in afterAll. */
async function provisioner(): Promise<ProvisionerProcess> {
  const p = await startProvisioner({
    kubeconfig: inject("kubeconfig"),
    namespace: ns,
    keys: [{ key: KEY, tenant: TENANT, maxSandboxes: 50 }],
  });
  started.push(p);
  return p;
}

interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- API answers of several shapes
  json: any;
  text: string;
}

/**
 * One HTTP call on a connection of its own (no keep-alive pool), so a provisioner that dies
 * fails exactly the calls it was serving. Rejects with the socket's error (ECONNRESET, "socket
 * hang up", ECONNREFUSED) when there is no answer.
 */
function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  timeoutMs = 180_000,
): Promise<Answer> {
  const payload =
    body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
  return new Promise<Answer>((resolve, reject) => {
    const req = request(
      `${base}${path}`,
      {
        method,
        agent: false,
        headers: {
          authorization: `Bearer ${KEY}`,
          ...(payload !== undefined
            ? {
                "content-type":
                  typeof body === "string" ? "application/octet-stream" : "application/json",
                "content-length": String(Buffer.byteLength(payload)),
              }
            : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (b: Buffer) => chunks.push(b));
        res.on("error", reject);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, json, text });
        });
      },
    );
    req.setTimeout(timeoutMs, () =>
      req.destroy(new Error(`no answer to ${method} ${path} within ${timeoutMs} ms`)),
    );
    req.on("error", reject);
    req.end(payload);
  });
}

const labelsOf = (s: SandboxObject) =>
  (s.metadata as { labels?: Record<string, string> }).labels ?? {};

/** Every Sandbox in the namespace but the other test's (so orphans of any shape count). */
const sandboxesBut = async (otherUser: string) =>
  (await sandboxes.list(c, ns)).filter((s) => labelsOf(s)[USER_LABEL] !== otherUser);

const errorLines = (logs: string) => logs.split("\n").filter((l) => /"level":(50|60)\b/.test(l));

/** The end of each provisioner's logs, for failure messages. */
function logsOf(named: Record<string, ProvisionerProcess | undefined>): string {
  return Object.entries(named)
    .map(
      ([n, p]) => `\n--- provisioner ${n} logs (end) ---\n${p ? p.logs().slice(-6000) : "(none)"}`,
    )
    .join("");
}

const describeErr = (err: unknown) => {
  const e = err as NodeJS.ErrnoException;
  return e.code ? `${e.code}: ${e.message}` : String(e?.message ?? err);
};

describe("provisioner faults", () => {
  test(
    "a provisioner killed with SIGKILL during 20 concurrent creates loses nothing",
    { timeout: 300_000 },
    async () => {
      const a = await provisioner();
      const threads = Array.from({ length: 20 }, (_, i) => `kill-${String(i).padStart(2, "0")}`);
      const user = KILL_USER;
      const create = (base: string, threadId: string) =>
        call(base, "POST", "/v1/sandboxes", { threadId, userId: user, wait: true });

      // Every create goes to A; what A answered (unlikely before the kill) or how it failed.
      const onA = threads.map((t) =>
        create(a.url, t).then(
          (answer) => ({ thread: t, answer, error: undefined as string | undefined }),
          (err: unknown) => ({ thread: t, answer: undefined, error: describeErr(err) }),
        ),
      );
      // The kill comes once A has written its first Sandbox, while the rest are being written
      // or waiting for Ready.
      const firstSeen = await waitFor(
        "the first Sandbox written by provisioner A",
        30_000,
        async () => {
          const n = (await sandboxes.list(c, ns)).length;
          return n > 0 ? n : undefined;
        },
        50,
      ).catch(() => 0);
      await a.kill9();
      const first = await Promise.all(onA);
      const failed = first.filter((r) => r.answer === undefined);
      const answeredByA = first.filter((r) => r.answer !== undefined);
      const summaryA =
        `Sandboxes when A was killed: ${firstSeen}; ` +
        `answered by A: ${answeredByA.map((r) => `${r.thread}=${r.answer!.status}`).join(", ") || "none"}; ` +
        `failed on A: ${failed.map((r) => `${r.thread} (${r.error})`).join(", ") || "none"}`;
      expect(
        firstSeen,
        `no Sandbox appeared within 30 s of the creates${logsOf({ A: a })}`,
      ).toBeGreaterThan(0);
      // The kill must have cut creates in flight, or this test proves nothing.
      expect(failed.length, `${summaryA}${logsOf({ A: a })}`).toBeGreaterThan(0);
      for (const r of answeredByA)
        expect([200, 201], `${r.thread}: ${r.answer!.text}\n${summaryA}`).toContain(
          r.answer!.status,
        );

      // A fresh replica; every client whose call failed retries the same (user, thread) there.
      const b = await provisioner();
      // What A managed to write before it died (an in-flight create the API server finished
      // included): B must hand out exactly these, untouched, and create the rest.
      // Read once the listing has held still for 2 s: a create A had sent may land late.
      let seen = "";
      let since = Date.now();
      const settled = await waitFor("A's creates to settle", 60_000, async () => {
        const list = await sandboxesBut(REPLICAS_USER);
        const names = list
          .map((s) => s.metadata.name)
          .sort()
          .join(",");
        if (names !== seen) [seen, since] = [names, Date.now()];
        return Date.now() - since >= 2_000 ? list : undefined;
      });
      const writtenByA = new Map(
        settled.map((s) => [labelsOf(s)[THREAD_LABEL] ?? s.metadata.name, s.metadata.uid]),
      );
      const retried = await Promise.all(
        failed.map(async (r) => {
          const attempts: string[] = [];
          for (let i = 0; i < 3; i++) {
            try {
              const answer = await create(b.url, r.thread);
              attempts.push(`HTTP ${answer.status}`);
              if (answer.status === 200 || answer.status === 201)
                return { thread: r.thread, answer, attempts };
              attempts.push(answer.text.slice(0, 300));
            } catch (err) {
              attempts.push(describeErr(err));
            }
            await new Promise((res) => setTimeout(res, 1_000));
          }
          return { thread: r.thread, answer: undefined, attempts };
        }),
      );
      const context = `\n${summaryA}\nwritten by A: ${[...writtenByA.keys()].join(", ")}\nretries on B: ${retried
        .map((r) => `${r.thread}: ${r.attempts.join(" → ")}`)
        .join("; ")}${logsOf({ A: a, B: b })}`;

      const final = new Map<string, Answer>();
      for (const r of answeredByA) final.set(r.thread, r.answer!);
      for (const r of retried) if (r.answer) final.set(r.thread, r.answer);
      expect(
        threads.filter((t) => !final.has(t)),
        `threads without a sandbox after the retries${context}`,
      ).toEqual([]);
      for (const t of threads) {
        const answer = final.get(t)!;
        expect([200, 201], `${t}: ${answer.text}${context}`).toContain(answer.status);
        expect(answer.json.phase, `${t}: ${answer.text}${context}`).toBe("Ready");
        expect(answer.json.threadId, `${t}: ${answer.text}`).toBe(t);
      }
      const ids = threads.map((t) => final.get(t)!.json.id as string);
      expect(new Set(ids).size, `ids: ${ids.join(", ")}${context}`).toBe(threads.length);

      // Exactly one Sandbox per thread: no duplicates, no orphans, each the one handed out.
      const objects = await sandboxesBut(REPLICAS_USER);
      const byThread = new Map<string, string[]>();
      for (const s of objects) {
        const t = labelsOf(s)[THREAD_LABEL] ?? "(no thread label)";
        byThread.set(t, [...(byThread.get(t) ?? []), s.metadata.name]);
      }
      const listing = JSON.stringify(Object.fromEntries(byThread));
      expect(objects, `Sandboxes by thread: ${listing}${context}`).toHaveLength(threads.length);
      expect([...byThread.keys()].sort(), `Sandboxes by thread: ${listing}`).toEqual(threads);
      for (const t of threads)
        expect(byThread.get(t), `Sandboxes of ${t}: ${listing}`).toEqual([final.get(t)!.json.id]);
      for (const s of objects) {
        const t = labelsOf(s)[THREAD_LABEL]!;
        expect(s.status?.phase, `${s.metadata.name}: ${JSON.stringify(s.status)}`).toBe("Ready");
        expect(labelsOf(s)[USER_LABEL], s.metadata.name).toBe(user);
        // A's Sandboxes were adopted as they were (not deleted and made again): B answered 200.
        if (writtenByA.has(t)) {
          expect(s.metadata.uid, `${t} was replaced${context}`).toBe(writtenByA.get(t));
          if (!answeredByA.some((r) => r.thread === t))
            expect(final.get(t)!.status, `${t}${context}`).toBe(200);
        } else {
          expect(final.get(t)!.status, `${t}${context}`).toBe(201);
        }
      }

      // A sample runs code through B's proxy: some of A's Sandboxes and some of B's.
      const adopted = threads.filter((t) => writtenByA.has(t));
      const made = threads.filter((t) => !writtenByA.has(t));
      const sample = [...adopted.slice(0, 2), ...made.filter((_, i) => i % 5 === 0)].slice(0, 5);
      const outputs = await Promise.all(
        sample.map((t) =>
          call(b.url, "POST", `/v1/sandboxes/${final.get(t)!.json.id}/proxy/v1/code/execute`, {
            language: "python",
            code: `print("hello from ${t}")`,
          }),
        ),
      );
      sample.forEach((t, i) => {
        const out = outputs[i]!;
        expect(out.status, `${t}: ${out.text}${logsOf({ B: b })}`).toBe(200);
        expect(out.json.stdout, `${t}: ${out.text}`).toBe(`hello from ${t}\n`);
      });

      expect(errorLines(b.logs()), `provisioner B logged errors${logsOf({ B: b })}`).toEqual([]);
      await b.stop();
    },
  );

  test(
    "two provisioner replicas hand out the same sandbox for one thread",
    { timeout: 240_000 },
    async () => {
      const [r1, r2] = await Promise.all([provisioner(), provisioner()]);
      const body = { threadId: "shared", userId: REPLICAS_USER, wait: true };
      const settled = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          call(i % 2 === 0 ? r1.url : r2.url, "POST", "/v1/sandboxes", body),
        ),
      );
      const context = logsOf({ "replica 1": r1, "replica 2": r2 });
      const answers = settled.map((s, i) => {
        expect(
          s.status,
          `create #${i} (replica ${(i % 2) + 1}) failed: ${s.status === "rejected" ? describeErr(s.reason) : ""}${context}`,
        ).toBe("fulfilled");
        return (s as PromiseFulfilledResult<Answer>).value;
      });
      const summary = answers
        .map((a, i) => `#${i} r${(i % 2) + 1}: ${a.status} ${a.json?.id ?? a.text.slice(0, 200)}`)
        .join("\n");
      for (const a of answers) {
        expect([200, 201], `${summary}${context}`).toContain(a.status);
        expect(a.json.phase, `${summary}${context}`).toBe("Ready");
      }
      const ids = new Set(answers.map((a) => a.json.id as string));
      expect(ids.size, `${summary}${context}`).toBe(1);
      expect(
        answers.filter((a) => a.status === 201),
        `${summary}${context}`,
      ).toHaveLength(1);
      const id = [...ids][0]!;

      const objects = await sandboxesBut(KILL_USER);
      expect(
        objects.map((s) => `${s.metadata.name} ${JSON.stringify(labelsOf(s))}`),
        `Sandboxes of this test${context}`,
      ).toEqual([`${id} ${JSON.stringify(labelsOf(objects[0]!))}`]);
      expect(labelsOf(objects[0]!)).toMatchObject({
        [USER_LABEL]: REPLICAS_USER,
        [THREAD_LABEL]: "shared",
      });

      // A file written through replica 1 is read through replica 2, and back.
      const path = encodeURIComponent("/mnt/user-data/workspace/replicas.txt");
      const files = `/v1/sandboxes/${id}/proxy/v1/files?path=${path}`;
      const put = await call(r1.url, "PUT", files, "written through replica 1\n");
      expect(put.status, `${put.text}${context}`).toBe(201);
      const got = await call(r2.url, "GET", files);
      expect(got.status, `${got.text}${context}`).toBe(200);
      expect(got.text).toBe("written through replica 1\n");
      const py = await call(r2.url, "POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, {
        language: "python",
        code: "open('/mnt/user-data/workspace/replicas.txt','a').write('appended through replica 2\\n')",
      });
      expect(py.status, `${py.text}${context}`).toBe(200);
      const back = await call(r1.url, "GET", files);
      expect(back.text, `${back.text}${context}`).toBe(
        "written through replica 1\nappended through replica 2\n",
      );

      for (const [n, p] of [
        ["replica 1", r1],
        ["replica 2", r2],
      ] as const)
        expect(errorLines(p.logs()), `${n} logged errors${logsOf({ [n]: p })}`).toEqual([]);
    },
  );
});
