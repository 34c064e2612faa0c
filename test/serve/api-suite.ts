/**
 * The provisioner's APIs as `sandpit serve` answers them, on one backend: the native API
 * (create-and-wait and its idempotency, keys, tenants, quotas, pause and wake, the proxy, ports,
 * a WebSocket through the proxy), the DeerFlow-compatible API with its capability URL, bad input,
 * and a serve process SIGKILLed and restarted on the same state losing nothing. Registered by
 * test/serve/local.test.ts and test/serve/docker.test.ts.
 */
import { createHash, randomUUID } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import WebSocket from "ws";
import { type Answer, KEYS, type ServeProcess, call, startServe, removeState } from "./harness.ts";

export interface ServeTarget {
  /** Flags for this backend (`--backend local`, the Docker image, ...). */
  args: string[];
  /** What of serve state `stateId`'s sandboxes the backend still holds (names, for a message). */
  leftovers: (stateDir: string, stateId: string) => Promise<string[]>;
  /** Environment serve needs on this backend (DOCKER_HOST, say). */
  env?: Record<string, string>;
  /** What serve carries out on this backend of the options it may refuse. */
  supports: { resources: boolean; networkDeny: boolean };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it returns something truthy; bounded in time. */
async function until<T>(
  what: string,
  ms: number,
  probe: () => Promise<T | undefined | false>,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

export function serveApiSuite(backend: string, target: ServeTarget): void {
  let stateDir: string;
  let serve: ServeProcess;
  const env = {
    SANDPIT_API_KEYS: JSON.stringify([
      { key: KEYS.a, tenant: "a", maxSandboxes: 50 },
      { key: KEYS.b, tenant: "b", maxSandboxes: 50 },
      { key: KEYS.small, tenant: "small", maxSandboxes: 1 },
      { key: KEYS.deerflow, tenant: "deerflow", maxSandboxes: 20 },
    ]),
    SANDPIT_MAX_BODY_BYTES: "65536",
    ...target.env,
  };
  const start = async () => {
    serve = await startServe(["--state-dir", stateDir, ...target.args], env);
  };
  const api = (method: string, path: string, key?: string, body?: unknown): Promise<Answer> =>
    call(serve.url, method, path, key ? { bearer: key } : undefined, body);
  const df = (method: string, path: string, body?: unknown, key = KEYS.deerflow) =>
    call(serve.url, method, path, { apiKey: key }, body);
  const run = async (id: string, code: string, key = KEYS.a) => {
    const r = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, key, {
      language: "python",
      code,
    });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    return r.json as { stdout: string; stderr: string };
  };
  const stateId = async () =>
    (JSON.parse(await readFile(join(stateDir, "serve.json"), "utf8")) as { id: string }).id;

  beforeAll(async () => {
    stateDir = await mkdtemp(join(tmpdir(), `sandpit-serve-${backend}-`));
    await start();
  });

  afterAll(async () => {
    if (serve) {
      // Whatever a failed test left: deleted through the API, so the backend is clean.
      for (const key of Object.values(KEYS)) {
        const list = await api("GET", "/v1/sandboxes", key).catch(() => undefined);
        for (const s of (list?.json.sandboxes ?? []) as { id: string }[])
          await api("DELETE", `/v1/sandboxes/${s.id}`, key).catch(() => undefined);
      }
      await serve.stop();
    }
    if (stateDir) await removeState(stateDir);
  });

  describe(`sandpit serve (${backend}): native API`, () => {
    test(
      "20 concurrent creates for one (user, thread) give one sandbox, Ready, which runs code",
      { timeout: 180_000 },
      async () => {
        const answers = await Promise.all(
          Array.from({ length: 20 }, () =>
            api("POST", "/v1/sandboxes", KEYS.a, {
              threadId: "t-20",
              userId: "u1",
              env: { WHO: "a" },
            }),
          ),
        );
        expect(answers.map((a) => a.status).filter((s) => s !== 200 && s !== 201)).toEqual([]);
        const ids = new Set(answers.map((a) => a.json.id));
        expect(ids.size).toBe(1);
        expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
        expect(answers.every((a) => a.json.phase === "Ready")).toBe(true);
        const id = [...ids][0] as string;
        expect((await run(id, "import os; print(os.environ['WHO'])")).stdout).toBe("a\n");
        const byLabel = await api("GET", "/v1/sandboxes?label=sandpit.dev/thread=t-20", KEYS.a);
        expect(byLabel.json.sandboxes.map((s: { id: string }) => s.id)).toEqual([id]);
        expect((await api("GET", "/v1/sandboxes", KEYS.b)).json.sandboxes).toEqual([]);
        expect((await api("GET", `/v1/sandboxes/${id}`, KEYS.b)).status).toBe(404);
        const other = await api("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, KEYS.b, {
          language: "python",
          code: "print(1)",
        });
        expect(other.status).toBe(404);
        expect((await api("DELETE", `/v1/sandboxes/${id}`, KEYS.a)).status).toBe(204);
        expect((await api("GET", `/v1/sandboxes/${id}`, KEYS.a)).status).toBe(404);
      },
    );

    test("keys and bad input: 401, 400 naming the field, 413, 404, in the error envelope", async () => {
      const none = await api("GET", "/v1/sandboxes");
      expect(none.status).toBe(401);
      expect(none.json.error).toMatchObject({ code: "UNAUTHORIZED" });
      expect(none.json.error.message).toMatch(/missing API key/);
      expect((await api("GET", "/v1/sandboxes", "not-a-key-at-all-0123456789")).status).toBe(401);
      const bad = await api("POST", "/v1/sandboxes", KEYS.a, { language: "cobol", ttlSeconds: 5 });
      expect(bad.status).toBe(400);
      expect(bad.json.error.code).toBe("INVALID_ARGUMENT");
      expect(bad.json.error.message).toMatch(/body.language/);
      expect(bad.json.error.message).toMatch(/body.ttlSeconds/);
      expect((await api("POST", "/v1/sandboxes", KEYS.a, "{not json")).status).toBe(400);
      const big = await api("POST", "/v1/sandboxes", KEYS.a, { env: { BIG: "x".repeat(100_000) } });
      expect(big.status).toBe(413);
      expect((await api("GET", "/v1/nothing-here", KEYS.a)).json.error.code).toBe("NOT_FOUND");
      const missing = await api("GET", "/v1/sandboxes/sbx-nope", KEYS.a);
      expect(missing.status).toBe(404);
      expect(missing.json.error.code).toBe("NOT_FOUND");
      expect((await api("GET", "/v1/sandboxes?label=nokeyvalue", KEYS.a)).status).toBe(400);
      const dfBad = await df("POST", "/api/sandboxes", {
        sandbox_id: "x",
        thread_id: "no spaces here",
      });
      expect(dfBad.status).toBe(400);
      expect(dfBad.json.error.code).toBe("INVALID_ARGUMENT");
      expect(
        (await df("GET", "/api/sandboxes", undefined, "wrong-key-0123456789abcdef")).status,
      ).toBe(401);
      // Nothing was made by any of it.
      expect((await api("GET", "/v1/sandboxes", KEYS.a)).json.sandboxes).toEqual([]);
    });

    test("what serve cannot do here is 400 NOT_SUPPORTED naming it; nothing is made", async () => {
      const refused = [
        { pool: "gpu" },
        { resources: { ephemeralStorage: "1Gi" } },
        ...(target.supports.resources ? [] : [{ resources: { cpu: "500m" } }]),
        ...(target.supports.networkDeny ? [] : [{ network: "deny" }]),
      ];
      for (const body of refused) {
        const r = await api("POST", "/v1/sandboxes", KEYS.a, body);
        expect(r.status, JSON.stringify(body)).toBe(400);
        expect(r.json.error.code).toBe("NOT_SUPPORTED");
        expect(r.json.error.message).toContain(`sandpit serve on the ${backend} backend`);
        expect(r.json.error.message).toMatch(/it supports: ttlSeconds/);
      }
      expect((await api("GET", "/v1/sandboxes", KEYS.a)).json.sandboxes).toEqual([]);
    });

    test("SANDPIT_DEFAULT_POOL is refused at start: serve has no pools", async () => {
      const dir = await mkdtemp(join(tmpdir(), `sandpit-serve-pool-${backend}-`));
      try {
        await expect(
          startServe(["--state-dir", dir, ...target.args], { ...env, SANDPIT_DEFAULT_POOL: "p" }),
        ).rejects.toThrow(/SANDPIT_DEFAULT_POOL names a SandboxPool/);
      } finally {
        await removeState(dir);
      }
    });

    test.runIf(target.supports.networkDeny)(
      'network "deny" gives a sandbox with loopback only, still reached through the proxy',
      { timeout: 120_000 },
      async () => {
        const made = await api("POST", "/v1/sandboxes", KEYS.a, {
          threadId: "t-deny",
          network: "deny",
        });
        expect(made.status, JSON.stringify(made.json)).toBe(201);
        const ifaces = await run(
          made.json.id,
          "print(' '.join(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))",
        );
        expect(ifaces.stdout).toBe("lo\n");
        expect((await api("DELETE", `/v1/sandboxes/${made.json.id}`, KEYS.a)).status).toBe(204);
      },
    );

    test.runIf(target.supports.resources)(
      "resources become the sandbox's limits",
      { timeout: 120_000 },
      async () => {
        const made = await api("POST", "/v1/sandboxes", KEYS.a, {
          threadId: "t-limits",
          resources: { cpu: "500m", memory: "256Mi" },
        });
        expect(made.status, JSON.stringify(made.json)).toBe(201);
        // cgroup v2's files, else v1's: the memory limit in bytes, the CPU quota per period.
        const limits = await run(
          made.json.id,
          [
            "import os",
            "def first(*ps):",
            "    p = next(p for p in ps if os.path.exists(p))",
            "    return open(p).read().split()[0]",
            "print(first('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'),",
            "      first('/sys/fs/cgroup/cpu.max', '/sys/fs/cgroup/cpu/cpu.cfs_quota_us'))",
          ].join("\n"),
        );
        expect(limits.stdout, limits.stderr).toBe(`${256 * 1024 * 1024} 50000\n`);
        expect((await api("DELETE", `/v1/sandboxes/${made.json.id}`, KEYS.a)).status).toBe(204);
      },
    );

    test("a key's quota: the second sandbox is 429 RATE_LIMITED with Retry-After", async () => {
      const first = await api("POST", "/v1/sandboxes", KEYS.small, { wait: false });
      expect(first.status).toBe(201);
      const second = await api("POST", "/v1/sandboxes", KEYS.small, { wait: false });
      expect(second.status).toBe(429);
      expect(second.json.error.code).toBe("RATE_LIMITED");
      expect(second.headers.get("retry-after")).toBe("30");
      expect((await api("DELETE", `/v1/sandboxes/${first.json.id}`, KEYS.small)).status).toBe(204);
      const third = await api("POST", "/v1/sandboxes", KEYS.small, {});
      expect(third.status).toBe(201);
      expect((await api("DELETE", `/v1/sandboxes/${third.json.id}`, KEYS.small)).status).toBe(204);
    });

    test("concurrent creates cannot pass a key's quota together: each counts from its start", async () => {
      // Eight at once under a quota of one, none of them running yet when the others arrive.
      const all = await Promise.all(
        Array.from({ length: 8 }, () => api("POST", "/v1/sandboxes", KEYS.small, { wait: false })),
      );
      const made = all.filter((r) => r.status === 201);
      expect(made).toHaveLength(1);
      for (const r of all.filter((x) => x.status !== 201)) {
        expect(r.status).toBe(429);
        expect(r.json.error.code).toBe("RATE_LIMITED");
      }
      const listed = await api("GET", "/v1/sandboxes", KEYS.small);
      expect(listed.json.sandboxes).toHaveLength(1);
      expect((await api("DELETE", `/v1/sandboxes/${made[0]!.json.id}`, KEYS.small)).status).toBe(
        204,
      );
    });

    test(
      "pause keeps the files; a proxied request wakes the sandbox; resume answers Ready",
      { timeout: 120_000 },
      async () => {
        const made = await api("POST", "/v1/sandboxes", KEYS.a, { threadId: "t-pause" });
        const id = made.json.id as string;
        await run(id, "open('/mnt/user-data/kept.txt', 'w').write('still here')");
        const paused = await api("POST", `/v1/sandboxes/${id}/pause`, KEYS.a);
        expect(paused.status).toBe(202);
        expect((await api("GET", `/v1/sandboxes/${id}`, KEYS.a)).json.phase).toBe("Suspended");
        expect((await run(id, "print(open('/mnt/user-data/kept.txt').read())")).stdout).toBe(
          "still here\n",
        );
        expect((await api("GET", `/v1/sandboxes/${id}`, KEYS.a)).json.phase).toBe("Ready");
        await api("POST", `/v1/sandboxes/${id}/pause`, KEYS.a);
        const resumed = await api("POST", `/v1/sandboxes/${id}/resume`, KEYS.a);
        expect(resumed.status).toBe(200);
        expect(resumed.json.phase).toBe("Ready");
        expect(typeof resumed.json.token).toBe("string");
        expect((await api("DELETE", `/v1/sandboxes/${id}`, KEYS.a)).status).toBe(204);
      },
    );

    test(
      "ports: a server inside over /ports/:port; a terminal over a proxied WebSocket",
      { timeout: 120_000 },
      async () => {
        const id = (await api("POST", "/v1/sandboxes", KEYS.a, { threadId: "t-ports" })).json
          .id as string;
        const started = await api("POST", `/v1/sandboxes/${id}/proxy/v1/processes`, KEYS.a, {
          command:
            "mkdir -p /tmp/site && echo served > /tmp/site/i.txt && cd /tmp/site && exec python3 -m http.server 8765 --bind 127.0.0.1",
        });
        expect(started.status, JSON.stringify(started.json)).toBe(201);
        const page = await until("the server in the sandbox", 30_000, async () => {
          const r = await api("GET", `/v1/sandboxes/${id}/ports/8765/i.txt`, KEYS.a);
          return r.status === 200 ? r : undefined;
        });
        expect(page.json).toBe("served\n");
        expect((await api("GET", `/v1/sandboxes/${id}/ports/0/`, KEYS.a)).status).toBe(400);

        const pty = await api("POST", `/v1/sandboxes/${id}/proxy/v1/pty`, KEYS.a, {
          cols: 80,
          rows: 24,
          command: "echo from-the-pty; sleep 1",
        });
        expect(pty.status).toBe(201);
        const ws = new WebSocket(
          `${serve.url.replace("http", "ws")}/v1/sandboxes/${id}/proxy/v1/pty/${pty.json.pid}/connect`,
          { headers: { authorization: `Bearer ${KEYS.a}` } },
        );
        let seen = "";
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no pty output: ${seen}`)), 20_000);
          ws.on("message", (data: Buffer, binary: boolean) => {
            if (binary) seen += data.toString();
            if (seen.includes("from-the-pty")) {
              clearTimeout(timer);
              resolve();
            }
          });
          ws.on("error", reject);
        });
        ws.close();
        expect((await api("DELETE", `/v1/sandboxes/${id}`, KEYS.a)).status).toBe(204);
      },
    );
  });

  describe(`sandpit serve (${backend}): DeerFlow API`, () => {
    test(
      "create, its sandbox_url, list, get, a wrong capability, delete",
      { timeout: 120_000 },
      async () => {
        const thread = randomUUID();
        const sandboxId = createHash("sha256")
          .update(`default:${thread}`)
          .digest("hex")
          .slice(0, 16);
        const made = await df("POST", "/api/sandboxes", {
          sandbox_id: sandboxId,
          thread_id: thread,
          user_id: "default",
        });
        expect(made.status, JSON.stringify(made.json)).toBe(200);
        expect(made.json).toMatchObject({ sandbox_id: sandboxId, status: "Running" });
        const url = made.json.sandbox_url as string;
        expect(url.startsWith(`${serve.url}/aio/`)).toBe(true);
        const info = await until("the sandbox_url", 60_000, async () => {
          const r = await fetch(`${url}/v1/sandbox`);
          return r.ok ? r.json() : undefined;
        });
        expect(info).toBeTruthy();
        const listed = await df("GET", "/api/sandboxes");
        expect(listed.json.sandboxes.map((s: { sandbox_id: string }) => s.sandbox_id)).toEqual([
          sandboxId,
        ]);
        expect((await df("GET", `/api/sandboxes/${sandboxId}`)).json.sandbox_url).toBe(url);
        expect((await df("GET", `/api/sandboxes/${sandboxId}`, undefined, KEYS.a)).status).toBe(
          404,
        );
        const wrong = url.replace(/\/[^/]+$/, "/not-the-capability");
        expect((await fetch(`${wrong}/v1/sandbox`)).status).toBe(404);
        // The capability opens the AIO routes only, never sandboxd's native API.
        expect((await fetch(`${url}/v1/init`, { method: "POST" })).status).toBe(404);
        // Created again: the same sandbox.
        const again = await df("POST", "/api/sandboxes", {
          sandbox_id: sandboxId,
          thread_id: thread,
          user_id: "default",
        });
        expect(again.json.sandbox_url).toBe(url);
        expect((await df("DELETE", `/api/sandboxes/${sandboxId}`)).json).toEqual({
          ok: true,
          sandbox_id: sandboxId,
        });
        expect((await df("GET", `/api/sandboxes/${sandboxId}`)).status).toBe(404);
        expect((await fetch(`${url}/v1/sandbox`)).status).toBe(404);
      },
    );
  });

  describe(`sandpit serve (${backend}): restart`, () => {
    test(
      "SIGKILLed and restarted on the same state: every sandbox, thread and file is there; rm leaves nothing",
      { timeout: 240_000 },
      async () => {
        const native = await api("POST", "/v1/sandboxes", KEYS.a, {
          threadId: "t-restart",
          userId: "u-restart",
          labels: { team: "blue" },
        });
        expect(native.status).toBe(201);
        const id = native.json.id as string;
        await run(id, "open('/mnt/user-data/survives.txt', 'w').write('yes')");
        const paused = (await api("POST", "/v1/sandboxes", KEYS.b, { threadId: "t-paused" })).json
          .id as string;
        await api("POST", `/v1/sandboxes/${paused}/pause`, KEYS.b);
        // A new end for a paused sandbox is the backend's too: the restart keeps it.
        const timed = await api("POST", `/v1/sandboxes/${paused}/timeout`, KEYS.b, {
          timeoutSeconds: 3600,
        });
        expect(timed.status, JSON.stringify(timed.json)).toBe(200);
        const thread = randomUUID();
        const made = await df("POST", "/api/sandboxes", {
          sandbox_id: "deerflow-restart",
          thread_id: thread,
          user_id: "default",
        });
        const url = made.json.sandbox_url as string;
        const before = {
          a: (await api("GET", "/v1/sandboxes", KEYS.a)).json,
          b: (await api("GET", "/v1/sandboxes", KEYS.b)).json,
        };

        await serve.kill();
        await start();

        const after = {
          a: (await api("GET", "/v1/sandboxes", KEYS.a)).json,
          b: (await api("GET", "/v1/sandboxes", KEYS.b)).json,
        };
        // Same sandboxes, ids, threads, users and labels; the URLs name the new port.
        const shape = (l: { sandboxes: Record<string, unknown>[] }) =>
          l.sandboxes
            .map(({ id: i, threadId, userId, labels }) => ({ i, threadId, userId, labels }))
            .sort((x, y) => String(x.i).localeCompare(String(y.i)));
        expect(shape(after.a)).toEqual(shape(before.a));
        expect(shape(after.b)).toEqual(shape(before.b));
        expect(after.a.sandboxes[0].labels).toMatchObject({ team: "blue" });
        const pausedAfter = (await api("GET", `/v1/sandboxes/${paused}`, KEYS.b)).json;
        expect(pausedAfter.phase).toBe("Suspended");
        expect(
          Math.abs(Date.parse(pausedAfter.expiresAt) - Date.parse(timed.json.expiresAt)),
        ).toBeLessThan(2_000);
        expect((await run(id, "print(open('/mnt/user-data/survives.txt').read())")).stdout).toBe(
          "yes\n",
        );
        // The thread still maps to its sandbox.
        const again = await api("POST", "/v1/sandboxes", KEYS.a, {
          threadId: "t-restart",
          userId: "u-restart",
        });
        expect(again.status).toBe(200);
        expect(again.json.id).toBe(id);
        // DeerFlow's sandbox: the same id, and the same capability on the new port.
        const got = await df("GET", "/api/sandboxes/deerflow-restart");
        expect(got.status).toBe(200);
        const path = (u: string) => new URL(u).pathname;
        expect(path(got.json.sandbox_url as string)).toBe(path(url));
        expect((await fetch(`${got.json.sandbox_url}/v1/sandbox`)).status).toBe(200);

        expect((await api("DELETE", `/v1/sandboxes/${id}`, KEYS.a)).status).toBe(204);
        expect((await api("DELETE", `/v1/sandboxes/${paused}`, KEYS.b)).status).toBe(204);
        expect((await df("DELETE", "/api/sandboxes/deerflow-restart")).status).toBe(200);
        expect(await target.leftovers(stateDir, await stateId())).toEqual([]);
      },
    );
  });

  describe(`sandpit serve (${backend}): idle timeout`, () => {
    test(
      "an idle sandbox is paused, and the next request wakes it",
      { timeout: 120_000 },
      async () => {
        const dir = await mkdtemp(join(tmpdir(), `sandpit-serve-idle-${backend}-`));
        const idle = await startServe(
          ["--state-dir", dir, "--idle-timeout", "2", ...target.args],
          env,
        );
        try {
          const a = (method: string, path: string, body?: unknown) =>
            call(idle.url, method, path, { bearer: KEYS.a }, body);
          const id = (await a("POST", "/v1/sandboxes", { threadId: "t-idle" })).json.id as string;
          await until("the idle sandbox to be paused", 30_000, async () => {
            return (await a("GET", `/v1/sandboxes/${id}`)).json.phase === "Suspended";
          });
          const out = await a("POST", `/v1/sandboxes/${id}/proxy/v1/code/execute`, {
            language: "python",
            code: "print('awake')",
          });
          expect(out.json.stdout).toBe("awake\n");
          expect((await a("DELETE", `/v1/sandboxes/${id}`)).status).toBe(204);
        } finally {
          await idle.stop();
          await removeState(dir);
        }
      },
    );
  });
}
