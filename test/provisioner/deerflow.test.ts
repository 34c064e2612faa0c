/**
 * The DeerFlow API against the real cluster, with the requests DeerFlow's RemoteSandboxBackend
 * sends (provisioner/README.md lists them): its create payload with extra_mounts, a null thread
 * and long or odd ids; a suspended sandbox reported Running and resumed by its sandbox_url;
 * scoping to the sandboxes made through it; get after a delete served by another replica; and
 * bad input answered 4xx in our words.
 */
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Clients,
  type ProvisionerApi,
  type ProvisionerProcess,
  type Stack,
  createClaim,
  pools,
  provisionerCall,
  runInClaim,
  sandboxes,
  startProvisioner,
  startStack,
  waitFor,
} from "../cluster/harness.ts";
import { type WatchGate, startWatchGate } from "../cluster/watch-gate.ts";

const KEY = "deerflow-key-0123456789abcdef";
const KEYS = [{ key: KEY, tenant: "deer", maxSandboxes: 50 }];
let stack: Stack;
let c: Clients;
let ns: string;
let second: ProvisionerProcess;

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "deer",
    keys: KEYS,
  });
  ({ c, ns } = stack);
  second = await startProvisioner({ kubeconfig: inject("kubeconfig"), namespace: ns, keys: KEYS });
}, 120_000);

afterAll(async () => {
  await second?.stop();
  await stack?.stop();
});

const xkey = { "x-api-key": KEY };
/** A DeerFlow call (X-API-Key) to replica `base`. */
const deer = (base: string, method: string, path: string, body?: unknown) =>
  provisionerCall(base, method, path, undefined, body, xkey);
const one = () => stack.prov.url;
const native: ProvisionerApi = (...args) => provisionerCall(stack.prov.url, ...args);

/** What RemoteSandboxBackend._provisioner_create sends, mounts filtered as it filters them. */
function deerflowCreate(sandboxId: string, threadId: string | null, userId: string) {
  const base = `/app/backend/.deer-flow/users/${userId}`;
  return {
    sandbox_id: sandboxId,
    thread_id: threadId,
    user_id: userId,
    include_legacy_skills: false,
    provision_lark_cli_runtime: false,
    provision_lark_cli_broker: false,
    extra_mounts: [
      {
        host_path: `${base}/threads/${threadId}/acp-workspace`,
        container_path: "/mnt/acp-workspace",
        read_only: true,
      },
      {
        host_path: `${base}/skills_view/custom`,
        container_path: "/mnt/skills/custom",
        read_only: true,
      },
      {
        host_path: `${base}/skills_view/integrations`,
        container_path: "/mnt/skills/integrations",
        read_only: true,
      },
      {
        host_path: `${base}/integrations/lark-cli/config`,
        container_path: "/mnt/integrations/lark-cli/config",
        read_only: true,
      },
      {
        host_path: `${base}/integrations/lark-cli/config/locks`,
        container_path: "/mnt/integrations/lark-cli/config/locks",
        read_only: false,
      },
      {
        host_path: `${base}/integrations/lark-cli/data`,
        container_path: "/mnt/integrations/lark-cli/data",
        read_only: false,
      },
    ],
  };
}

/** A shell command through the sandbox_url, as AioSandbox.execute_command sends it. */
async function shell(url: string, command: string): Promise<string> {
  const res = await fetch(`${url}/v1/shell/exec`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command }),
    signal: AbortSignal.timeout(120_000),
  });
  const body = (await res.json()) as { data?: { output?: string } };
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body.data?.output ?? "";
}

const objectOf = async (name: string) => sandboxes.get(c, ns, name);

describe("DeerFlow's create payloads", () => {
  test(
    "extra_mounts become empty writable directories, a null thread and an 86-character user id are taken",
    { timeout: 240_000 },
    async () => {
      // make_safe_user_id("someone.with.a.long.name@…"): sanitised, '-', 16 hex digits.
      const user =
        `${"someone-with-a-long-name-".repeat(2)}example-com-${"0".repeat(3)}-0123456789abcdef`
          .padEnd(86, "x")
          .slice(0, 86);
      expect(user).toHaveLength(86);
      const r = await deer(one(), "POST", "/api/sandboxes", deerflowCreate("1a2b3c4d", null, user));
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.json.sandbox_id).toBe("1a2b3c4d");
      expect(r.json.status).toBe("Running");
      // Asked read-only; an empty directory is writable, and the answer says so.
      expect(r.json.extra_mounts).toContainEqual({
        container_path: "/mnt/skills/custom",
        provided_as: "empty_dir",
        read_only: false,
      });
      expect(r.json.extra_mounts).toHaveLength(6);
      const url = r.json.sandbox_url as string;
      const out = await shell(
        url,
        "for d in /mnt/acp-workspace /mnt/skills/custom /mnt/integrations/lark-cli/config/locks; do touch $d/probe && ls -A $d; done",
      );
      expect(out.trim().split("\n")).toEqual(["probe", "probe", "probe"]);

      // The raw ids in annotations, label-safe values in labels: nothing the API server refused.
      const name = new URL(url).pathname.split("/")[2]!;
      const s = await objectOf(name);
      const meta = s.metadata as {
        labels?: Record<string, string>;
        annotations?: Record<string, string>;
      };
      expect(meta.annotations?.["sandpit.dev/user-id"]).toBe(user);
      expect(meta.labels?.["sandpit.dev/user"]).toMatch(/^h\.[0-9a-f]{40}$/);
      expect(s.spec.userId).toBe(user); // the Sandbox holds it whole: a subPath can name it
      expect(s.spec.emptyDirs).toHaveLength(6);

      // DeerFlow's is_alive and discover.
      const got = await deer(one(), "GET", "/api/sandboxes/1a2b3c4d");
      expect([got.status, got.json.status, got.json.sandbox_url]).toEqual([200, "Running", url]);
    },
  );

  test(
    "ids Kubernetes would refuse as label values, on both APIs; lists by user and thread still select them",
    { timeout: 240_000 },
    async () => {
      const thread = `-${"t".repeat(62)}_`; // 64 characters, leading '-', trailing '_'
      const r = await deer(one(), "POST", "/api/sandboxes", {
        ...deerflowCreate("-odd_", thread, "-lead"),
        extra_mounts: [],
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const n = await native("POST", "/v1/sandboxes", KEY, { userId: "_u-", threadId: thread });
      expect(n.status, JSON.stringify(n.json)).toBe(201);
      expect([n.json.userId, n.json.threadId]).toEqual(["_u-", thread]);
      const byThread = await native(
        "GET",
        `/v1/sandboxes?label=sandpit.dev/thread=${encodeURIComponent(thread)}`,
        KEY,
      );
      expect(byThread.json.sandboxes.map((s: { id: string }) => s.id).sort()).toEqual(
        [n.json.id, new URL(r.json.sandbox_url).pathname.split("/")[2]].sort(),
      );
      const byUser = await native("GET", "/v1/sandboxes?label=sandpit.dev/user=_u-", KEY);
      expect(byUser.json.sandboxes.map((s: { id: string }) => s.id)).toEqual([n.json.id]);
      await native("DELETE", `/v1/sandboxes/${n.json.id}`, KEY);
      await deer(one(), "DELETE", "/api/sandboxes/-odd_");
    },
  );
});

describe("extra_mounts the provisioner's settings map to a claim", () => {
  test(
    "/mnt/skills/custom is the skills claim, read-only; the other paths stay empty directories",
    { timeout: 240_000 },
    async () => {
      const image = inject("clusterSandboxImage");
      await createClaim(c, ns, "deerflow-skills");
      await runInClaim(c, ns, {
        claim: "deerflow-skills",
        image,
        script: "mkdir -p /claim/demo && echo 'use me' > /claim/demo/SKILL.md",
      });
      const mapped = await startProvisioner({
        kubeconfig: inject("kubeconfig"),
        namespace: ns,
        keys: KEYS,
        env: {
          SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({
            "/mnt/skills/custom": { claimName: "deerflow-skills", readOnly: true },
          }),
        },
      });
      try {
        const r = await deer(
          mapped.url,
          "POST",
          "/api/sandboxes",
          deerflowCreate("sk1", "t-sk", "u-sk"),
        );
        expect(r.status, JSON.stringify(r.json)).toBe(200);
        expect(r.json.extra_mounts).toHaveLength(6);
        for (const m of r.json.extra_mounts as { container_path: string }[]) {
          expect(m).toEqual(
            m.container_path === "/mnt/skills/custom"
              ? {
                  container_path: "/mnt/skills/custom",
                  provided_as: "volume",
                  claim_name: "deerflow-skills",
                  read_only: true,
                }
              : { container_path: m.container_path, provided_as: "empty_dir", read_only: false },
          );
        }
        const url = r.json.sandbox_url as string;
        expect((await shell(url, "cat /mnt/skills/custom/demo/SKILL.md")).trim()).toBe("use me");
        const write = await shell(
          url,
          "touch /mnt/skills/custom/x 2>/dev/null && echo wrote || echo refused; touch /mnt/acp-workspace/x && echo wrote",
        );
        expect(write.trim().split("\n")).toEqual(["refused", "wrote"]);
      } finally {
        await mapped.stop();
      }
    },
  );
});

describe("user data from a shared claim, in DeerFlow's layout", () => {
  test(
    "an 86-character user id (make_safe_user_id of an e-mail) renders the thread's subPath: uploads appear, outputs come back",
    { timeout: 240_000 },
    async () => {
      const image = inject("clusterSandboxImage");
      const user = "alice-longname-example-com-".repeat(4).slice(0, 80) + "-a1b2c";
      expect(user).toHaveLength(86);
      const thread = "3f2b8a94-6c1e-4d7a-9b0f-2e5c8d1a7b64";
      const dir = `/claim/users/${user}/threads/${thread}/user-data`;
      await createClaim(c, ns, "deerflow-data");
      await runInClaim(c, ns, {
        claim: "deerflow-data",
        image,
        script: `mkdir -p ${dir}/uploads ${dir}/outputs ${dir}/workspace && echo from-gateway > ${dir}/uploads/report.csv`,
      });
      await pools.create(c, ns, "deerflow-threads", {
        maxActive: 5,
        template: {
          storage: {
            sharedClaim: {
              claimName: "deerflow-data",
              subPath: "users/{user}/threads/{thread}/user-data",
            },
          },
        },
      });
      const threads = await startProvisioner({
        kubeconfig: inject("kubeconfig"),
        namespace: ns,
        keys: KEYS,
        env: { SANDPIT_DEFAULT_POOL: "deerflow-threads" },
      });
      try {
        const r = await deer(threads.url, "POST", "/api/sandboxes", {
          ...deerflowCreate("long-user", thread, user),
          extra_mounts: [],
        });
        expect(r.status, JSON.stringify(r.json)).toBe(200);
        const url = r.json.sandbox_url as string;
        await waitFor("the sandbox", 120_000, async () => (await fetch(`${url}/v1/sandbox`)).ok);
        expect((await shell(url, "cat /mnt/user-data/uploads/report.csv")).trim()).toBe(
          "from-gateway",
        );
        await shell(url, "echo from-agent > /mnt/user-data/outputs/answer.md");
        const back = await runInClaim(c, ns, {
          claim: "deerflow-data",
          image,
          script: `cat ${dir}/outputs/answer.md`,
        });
        expect(back).toBe("from-agent\n");
        const s = await objectOf(new URL(url).pathname.split("/")[2]!);
        expect([s.spec.userId, s.spec.threadId]).toEqual([user, thread]);
      } finally {
        await threads.stop();
      }
    },
  );
});

describe("a suspended sandbox", () => {
  test("is Running to DeerFlow, and its sandbox_url resumes it", { timeout: 240_000 }, async () => {
    const r = await deer(
      one(),
      "POST",
      "/api/sandboxes",
      deerflowCreate("sleepy", "th-sleepy", "u1"),
    );
    expect(r.status).toBe(200);
    const url = r.json.sandbox_url as string;
    await shell(url, "echo kept > /mnt/user-data/workspace/kept.txt");
    const name = new URL(url).pathname.split("/")[2]!;
    expect((await native("POST", `/v1/sandboxes/${name}/pause`, KEY)).status).toBe(202);
    await waitFor("the sandbox to be Suspended", 120_000, async () => {
      const s = await objectOf(name);
      return (s.status as { phase?: string } | undefined)?.phase === "Suspended";
    });
    const got = await deer(one(), "GET", "/api/sandboxes/sleepy");
    expect([got.status, got.json.status]).toEqual([200, "Running"]);
    expect(
      (await deer(one(), "GET", "/api/sandboxes")).json.sandboxes.find(
        (s: { sandbox_id: string }) => s.sandbox_id === "sleepy",
      )?.status,
    ).toBe("Running");
    expect(await shell(url, "cat /mnt/user-data/workspace/kept.txt")).toBe("kept\n");
    expect(((await objectOf(name)).status as { phase?: string }).phase).toBe("Ready");
  });
});

describe("scoping", () => {
  test(
    "the DeerFlow API lists and acts only on the sandboxes made through it",
    { timeout: 240_000 },
    async () => {
      const n = await native("POST", "/v1/sandboxes", KEY, { userId: "u1", threadId: "th-scope" });
      expect(n.status).toBe(201);
      const d = await deer(
        one(),
        "POST",
        "/api/sandboxes",
        deerflowCreate("scoped", "th-scope", "u1"),
      );
      expect(d.status).toBe(200);
      const listed = (await deer(one(), "GET", "/api/sandboxes")).json as {
        sandboxes: { sandbox_id: string; sandbox_url: string }[];
        count: number;
      };
      expect(listed.sandboxes.map((s) => s.sandbox_id)).toContain("scoped");
      expect(listed.sandboxes.some((s) => s.sandbox_url.includes(n.json.id))).toBe(false);
      expect(listed.count).toBe(listed.sandboxes.length);
      // The native sandbox, named as DeerFlow would name an id: not found, not deleted.
      expect((await deer(one(), "GET", `/api/sandboxes/${n.json.id}`)).status).toBe(404);
      expect((await deer(one(), "DELETE", `/api/sandboxes/${n.json.id}`)).status).toBe(404);
      expect((await native("GET", `/v1/sandboxes/${n.json.id}`, KEY)).status).toBe(200);
      await native("DELETE", `/v1/sandboxes/${n.json.id}`, KEY);
      await deer(one(), "DELETE", "/api/sandboxes/scoped");
    },
  );
});

describe("two replicas, one whose cache lags", () => {
  // `lagging` reaches the API server through a gate that holds its watch events back: what a
  // replica whose informer is behind sees, for as long as the test needs, not for a millisecond.
  let gate: WatchGate;
  let lagging: ProvisionerProcess;
  beforeAll(async () => {
    gate = await startWatchGate(inject("kubeconfig"));
    lagging = await startProvisioner({ kubeconfig: gate.kubeconfig, namespace: ns, keys: KEYS });
  }, 120_000);
  afterAll(async () => {
    gate?.release();
    await lagging?.stop();
    await gate?.close();
  });

  const seenByBoth = (id: string) =>
    waitFor(`both replicas to see ${id}`, 30_000, async () => {
      const got = await Promise.all(
        [lagging.url, second.url].map((u) => deer(u, "GET", `/api/sandboxes/${id}`)),
      );
      return got.every((g) => g.status === 200);
    });

  test(
    "a get right after a delete served by the other replica does not find the sandbox",
    { timeout: 300_000 },
    async () => {
      const id = "rep-1";
      const r = await deer(lagging.url, "POST", "/api/sandboxes", {
        sandbox_id: id,
        thread_id: id,
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      await seenByBoth(id);
      gate.hold();
      try {
        const del = await deer(second.url, "DELETE", `/api/sandboxes/${id}`);
        expect(del.json).toEqual({ ok: true, sandbox_id: id });
        // The lagging replica's cache still shows the sandbox: only a live read knows.
        const listed = await deer(lagging.url, "GET", "/api/sandboxes");
        expect(listed.json.sandboxes.map((s: { sandbox_id: string }) => s.sandbox_id)).toContain(
          id,
        );
        const got = await deer(lagging.url, "GET", `/api/sandboxes/${id}`);
        expect(got.status, JSON.stringify(got.json)).toBe(404);
      } finally {
        gate.release();
      }
    },
  );

  test(
    "a create right after a delete served by the other replica makes a new sandbox",
    { timeout: 300_000 },
    async () => {
      const body = { sandbox_id: "again-1", thread_id: "again-1" };
      const first = await deer(lagging.url, "POST", "/api/sandboxes", body);
      expect(first.status, JSON.stringify(first.json)).toBe(200);
      await seenByBoth(body.sandbox_id);
      gate.hold();
      let again: Awaited<ReturnType<typeof deer>>;
      try {
        expect((await deer(second.url, "DELETE", `/api/sandboxes/${body.sandbox_id}`)).status).toBe(
          200,
        );
        const creating = deer(lagging.url, "POST", "/api/sandboxes", body);
        // The create is in while the cache still shows the old sandbox; events then flow again.
        await new Promise((r) => setTimeout(r, 2_000));
        gate.release();
        again = await creating;
      } finally {
        gate.release();
      }
      expect(again.status, JSON.stringify(again.json)).toBe(200);
      // A new Sandbox carries a new capability, so its sandbox_url differs from the deleted one's.
      const url = (r: { json: unknown }) => (r.json as { sandbox_url: string }).sandbox_url;
      expect(url(again)).not.toBe(url(first));
      await waitFor(
        "the new sandbox",
        120_000,
        async () => (await fetch(`${url(again)}/v1/sandbox`)).ok,
      );
    },
  );
});

/** The status of a request sent with its path exactly as given (no URL normalization). */
function rawStatus(method: string, url: string, body?: string): Promise<number> {
  const { host, pathname } = new URL(url.replace(/\/v1\/.*$/, ""));
  const path = pathname + url.slice(url.indexOf("/v1/"));
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: host.split(":")[0],
        port: Number(host.split(":")[1]),
        method,
        path,
        headers: { "content-type": "application/json" },
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe("a sandbox_url", () => {
  test(
    "opens the AIO routes only: never /v1/init (which would replace the sandbox's token) nor the native API",
    { timeout: 240_000 },
    async () => {
      const r = await deer(one(), "POST", "/api/sandboxes", {
        sandbox_id: "cap-1",
        thread_id: "cap-1",
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const url = r.json.sandbox_url as string;
      await waitFor("the sandbox", 120_000, async () => (await fetch(`${url}/v1/sandbox`)).ok);
      const refused = [
        ["POST", "/v1/init", JSON.stringify({ token: "t".repeat(40) })],
        ["GET", "/v1/files?path=/mnt/user-data/workspace", undefined],
        ["POST", "/v1/commands/run", JSON.stringify({ command: "id" })],
        ["GET", "/v1/processes", undefined],
        // Dot segments as sent on the wire (fetch would resolve them before sending).
        ["POST", "/v1/file/%2E%2E/init", JSON.stringify({ token: "t".repeat(40) })],
        ["POST", "/v1/shell/../init", JSON.stringify({ token: "t".repeat(40) })],
      ] as const;
      for (const [method, path, body] of refused) {
        const status = await rawStatus(method, `${url}${path}`, body);
        expect(status, `${method} ${path}`).toBe(404);
      }
      // The AIO routes still work: the token was not replaced.
      expect((await shell(url, "echo still-mine")).trim()).toBe("still-mine");
    },
  );
});

describe("bad input", () => {
  test.each([
    [
      "11 extra_mounts",
      {
        sandbox_id: "b",
        extra_mounts: Array.from({ length: 11 }, (_, i) => ({
          host_path: "/h",
          container_path: `/mnt/m${i}`,
        })),
      },
    ],
    [
      "a repeated container path",
      {
        sandbox_id: "b",
        extra_mounts: [
          { host_path: "/h", container_path: "/mnt/a" },
          { host_path: "/g", container_path: "/mnt/a" },
        ],
      },
    ],
    [
      "a mount on the user-data volume",
      { sandbox_id: "b", extra_mounts: [{ host_path: "/h", container_path: "/mnt/user-data/x" }] },
    ],
    [
      "a relative container path",
      { sandbox_id: "b", extra_mounts: [{ host_path: "/h", container_path: "mnt/a" }] },
    ],
    [
      "a mount without host_path",
      { sandbox_id: "b", extra_mounts: [{ container_path: "/mnt/a" }] },
    ],
    ["a user id with a space", { sandbox_id: "b", user_id: "a b" }],
    ["a 256-character thread id", { sandbox_id: "b", thread_id: "t".repeat(256) }],
    ["no sandbox_id", { thread_id: "t" }],
    ["extra_mounts not a list", { sandbox_id: "b", extra_mounts: "/mnt/a" }],
  ])("%s is a 400 saying what is wrong, in our words", async (_what, body) => {
    const r = await deer(one(), "POST", "/api/sandboxes", body);
    expect(r.status, JSON.stringify(r.json)).toBe(400);
    expect(r.json.error.code).toBe("INVALID_ARGUMENT");
    expect(r.json.error.message).toMatch(/^body\./);
    expect(r.json.error.message).not.toMatch(/\/apis\/|namespaces\//);
  });
});
