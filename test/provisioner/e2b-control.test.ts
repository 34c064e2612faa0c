/**
 * The E2B-compatible control plane against the real cluster, driven by the official `e2b` SDK
 * (pinned in sdk/package.json) with nothing but its connection options changed: create with
 * metadata and timeout, get, list by metadata across pages, set timeout, pause and connect,
 * kill, and the SDK's own error classes for a bad key, an unknown sandbox or template, and a
 * key's quota. Also the dispatcher's refusals (access token, paused and unknown sandboxes,
 * hosts) and bad input, raw. The data plane (commands, files, code) has its own suite.
 */
import { ENVD_VERSION } from "../../provisioner/src/api/e2b/envd/index.ts";
import {
  AuthenticationError,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
} from "e2b";
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type Stack,
  pools,
  provisionerCall,
  sandboxes,
  startProvisioner,
  startStack,
  waitFor,
} from "../cluster/harness.ts";
import { startWatchGate } from "../cluster/watch-gate.ts";

const KEY = `e2b_${"a1".repeat(20)}`;
const KEY_OTHER = `e2b_${"b2".repeat(20)}`;
const KEY_ONE = `e2b_${"c3".repeat(20)}`;
const DOMAIN = "sandboxes.e2b.test";

const KEYS = [
  { key: KEY, tenant: "e2b", maxSandboxes: 20 },
  { key: KEY_OTHER, tenant: "other", maxSandboxes: 20 },
  { key: KEY_ONE, tenant: "one", maxSandboxes: 1 },
];
const ENV = { SANDPIT_E2B_TOKEN_SECRET: "s".repeat(48), SANDPIT_E2B_DOMAIN: DOMAIN };

let stack: Stack;
let base: string;
const opts = (apiKey = KEY) => ({ apiKey, apiUrl: base, sandboxUrl: base });

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "e2bc",
    keys: KEYS,
    env: ENV,
  });
  base = `${stack.prov.url}/e2b`;
});

afterAll(async () => {
  await stack?.stop();
});

/** One raw call to the E2B API with the SDK's credential header. */
async function e2b(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      "x-api-key": KEY,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json: json as Record<string, unknown>, headers: res.headers };
}

/** A GET with a Host header of our choosing (fetch does not let one be set). */
function getWithHost(host: string, path: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(`${stack.prov.url}${path}`, { headers: { ...headers, host } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected a rejection");
}

const seconds = (d: Date) => d.getTime() / 1000;

describe("E2B control plane through the official SDK", () => {
  test(
    "create with metadata and timeout; getInfo; the native API sees the same sandbox",
    { timeout: 180_000 },
    async () => {
      const sbx = await Sandbox.create({
        ...opts(),
        metadata: { owner: "alice", "odd key": "a value & more=1" },
        timeoutMs: 600_000,
        envs: { GREETING: "hi" },
      });
      expect(sbx.sandboxId).toMatch(/^sbx-/);
      const info = await sbx.getInfo();
      expect(info.sandboxId).toBe(sbx.sandboxId);
      expect(info.templateId).toBe("base");
      expect(info.metadata).toEqual({ owner: "alice", "odd key": "a value & more=1" });
      expect(info.state).toBe("running");
      expect(info.envdVersion).toBe(ENVD_VERSION);
      expect(info.cpuCount).toBeGreaterThanOrEqual(1);
      expect(info.memoryMB).toBeGreaterThan(0);
      expect(seconds(info.endAt) - seconds(info.startedAt)).toBe(600);
      expect(info.lifecycle).toEqual({ onTimeout: "kill", autoResume: false });

      const resource = await sandboxes.get(stack.c, stack.ns, sbx.sandboxId);
      expect(resource.spec.lifecycle).toMatchObject({ ttlSeconds: 600 });
      expect(resource.spec.env).toEqual([{ name: "GREETING", value: "hi" }]);
      const native = await provisionerCall(
        stack.prov.url,
        "GET",
        `/v1/sandboxes/${sbx.sandboxId}`,
        KEY,
      );
      expect(native.status).toBe(200);
      expect(native.json.phase).toBe("Ready");
      // Another tenant's key finds nothing.
      expect(await rejection(Sandbox.getInfo(sbx.sandboxId, opts(KEY_OTHER)))).toBeInstanceOf(
        NotFoundError,
      );
      await sbx.kill();
    },
  );

  test(
    "list by metadata with the v2 paginator, across pages, and by state",
    { timeout: 240_000 },
    async () => {
      const suite = `s${Date.now()}`;
      const made = await Promise.all(
        [0, 1, 2].map((n) =>
          Sandbox.create({ ...opts(), metadata: { suite, n: String(n) }, timeoutMs: 300_000 }),
        ),
      );
      const ids = made.map((s) => s.sandboxId).sort();
      const paginator = Sandbox.list({ ...opts(), query: { metadata: { suite } }, limit: 2 });
      const first = await paginator.nextItems();
      expect(first).toHaveLength(2);
      expect(paginator.hasNext).toBe(true);
      const second = await paginator.nextItems();
      expect(second).toHaveLength(1);
      expect(paginator.hasNext).toBe(false);
      expect([...first, ...second].map((s) => s.sandboxId).sort()).toEqual(ids);
      // Newest first, as E2B orders them.
      const all = [...first, ...second];
      for (let i = 1; i < all.length; i++)
        expect(all[i - 1]!.startedAt.getTime()).toBeGreaterThanOrEqual(all[i]!.startedAt.getTime());
      expect(all.every((s) => s.metadata.suite === suite && s.state === "running")).toBe(true);

      const one = await Sandbox.list({
        ...opts(),
        query: { metadata: { suite, n: "1" } },
      }).nextItems();
      expect(one.map((s) => s.sandboxId)).toEqual([made[1]!.sandboxId]);
      const paused = await Sandbox.list({
        ...opts(),
        query: { metadata: { suite }, state: ["paused"] },
      }).nextItems();
      expect(paused).toEqual([]);
      // v1 lists the running ones, unpaginated.
      const v1 = await e2b("GET", `/sandboxes?metadata=${encodeURIComponent(`suite=${suite}`)}`);
      expect(v1.status).toBe(200);
      expect(
        (v1.json as unknown as { sandboxID: string }[]).map((s) => s.sandboxID).sort(),
      ).toEqual(ids);
      await Promise.all(made.map((s) => s.kill()));
    },
  );

  test(
    "setTimeout moves endAt; pause → paused → connect → running, same token; kill → NotFoundError",
    { timeout: 300_000 },
    async () => {
      const sbx = await Sandbox.create({ ...opts(), timeoutMs: 120_000 });
      const id = sbx.sandboxId;
      const before = Date.now() / 1000;
      await sbx.setTimeout(900_000);
      const info = await sbx.getInfo();
      expect(seconds(info.endAt)).toBeGreaterThanOrEqual(Math.floor(before) + 900);
      expect(seconds(info.endAt)).toBeLessThanOrEqual(Date.now() / 1000 + 902);
      // Refresh only extends: a shorter one leaves the end where it was.
      expect((await e2b("POST", `/sandboxes/${id}/refreshes`, { duration: 60 })).status).toBe(204);
      expect((await sbx.getInfo()).endAt.getTime()).toBe(info.endAt.getTime());

      expect(await sbx.pause()).toBe(true);
      expect((await sbx.getInfo()).state).toBe("paused");
      expect((await sandboxes.get(stack.c, stack.ns, id)).status?.phase).toBe("Suspended");
      expect(await sbx.pause()).toBe(false); // already paused: E2B's 409
      const listed = await Sandbox.list({ ...opts(), query: { state: ["paused"] } }).nextItems();
      expect(listed.map((s) => s.sandboxId)).toContain(id);
      // The data plane does not wake it (it was not created with autoResume): E2B's 502.
      const health = await fetch(`${base}/health`, {
        headers: { "e2b-sandbox-id": id, "x-access-token": "whatever" },
      });
      expect(health.status).toBe(502);

      const again = await Sandbox.connect(id, opts());
      expect((await again.getInfo()).state).toBe("running");
      const connected = await e2b("POST", `/v2/sandboxes/${id}/connect`, {});
      expect(connected.status).toBe(200); // already running
      expect(connected.json.envdAccessToken).toBe(
        (await e2b("POST", `/sandboxes/${id}/connect`, { timeout: 60 })).json.envdAccessToken,
      );
      expect(connected.json).toMatchObject({ sandboxID: id, envdVersion: ENVD_VERSION });

      expect(await sbx.kill()).toBe(true);
      const gone = await rejection(Sandbox.getInfo(id, opts()));
      expect(gone).toBeInstanceOf(NotFoundError);
      expect(await Sandbox.kill(id, opts())).toBe(false);
    },
  );

  test("a bad key is the SDK's AuthenticationError", async () => {
    const bad = `e2b_${"0".repeat(40)}`;
    expect(await rejection(Sandbox.list(opts(bad)).nextItems())).toBeInstanceOf(
      AuthenticationError,
    );
    expect(await rejection(Sandbox.create(opts(bad)))).toBeInstanceOf(AuthenticationError);
    const raw = await e2b("GET", "/v2/sandboxes", undefined, { "x-api-key": "" });
    expect(raw.status).toBe(401);
    expect(raw.json).toMatchObject({ code: 401 });
  });

  test("an unknown sandbox is NotFoundError; connecting to one is SandboxNotFoundError", async () => {
    expect(await rejection(Sandbox.getInfo("sbx-nope", opts()))).toBeInstanceOf(NotFoundError);
    expect(await rejection(Sandbox.setTimeout("sbx-nope", 60_000, opts()))).toBeInstanceOf(
      NotFoundError,
    );
    expect(await rejection(Sandbox.connect("sbx-nope", opts()))).toBeInstanceOf(
      SandboxNotFoundError,
    );
    expect(await rejection(Sandbox.pause("sbx-nope", opts()))).toBeInstanceOf(NotFoundError);
  });

  test(
    "templates: an unknown one is E2B's 404, a SandboxPool's name selects that pool",
    { timeout: 180_000 },
    async () => {
      const err = await rejection(Sandbox.create("no-such-template", opts()));
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as SandboxError).statusCode).toBe(404);
      expect(err.message).toMatch(/template 'no-such-template' not found/);

      await pools.create(stack.c, stack.ns, "e2b-pool", {
        maxActive: 2,
        template: { resources: { cpu: "2", memory: "768Mi" } },
      });
      const sbx = await Sandbox.create("e2b-pool", opts());
      const info = await sbx.getInfo();
      expect(info.templateId).toBe("e2b-pool");
      expect(info.cpuCount).toBe(2);
      expect(info.memoryMB).toBe(768);
      expect((await sandboxes.get(stack.c, stack.ns, sbx.sandboxId)).spec.poolRef).toBe("e2b-pool");
      await sbx.kill();
    },
  );

  test("a key's quota is the SDK's RateLimitError", { timeout: 180_000 }, async () => {
    const first = await Sandbox.create(opts(KEY_ONE));
    const err = await rejection(Sandbox.create(opts(KEY_ONE)));
    expect(err).toBeInstanceOf(RateLimitError);
    expect(err.message).toMatch(/1 sandboxes at once/);
    await first.kill();
  });
});

describe("E2B API: refusals and bad input, raw", () => {
  test("bad JSON, wrong types and unsupported fields are 400 in E2B's shape", async () => {
    const badJson = await e2b("POST", "/v2/sandboxes", "{not json");
    expect(badJson.status).toBe(400);
    expect(badJson.json).toMatchObject({ code: 400 });
    const types = await e2b("POST", "/v2/sandboxes", {
      templateID: 7,
      timeout: "long",
      metadata: { a: 1 },
    });
    expect(types.status).toBe(400);
    expect(types.json.message).toMatch(/body\.templateID/);
    expect(types.json.message).toMatch(/body\.timeout/);
    expect(types.json.message).toMatch(/body\.metadata\.a/);
    const mcp = await e2b("POST", "/v2/sandboxes", { templateID: "base", mcp: { github: {} } });
    expect(mcp.status).toBe(400);
    expect(mcp.json.message).toMatch(/mcp .*not supported/);
    const long = await e2b("POST", "/v2/sandboxes", { templateID: "base", timeout: 90_000 });
    expect(long.status).toBe(400);
    expect(long.json.message).toMatch(/Timeout cannot be greater than 86400 seconds/);
    const query = await e2b("GET", "/v2/sandboxes?limit=0&state=sleeping&nextToken=zz");
    expect(query.status).toBe(400);
    expect(query.json.message).toMatch(/limit/);
    expect(query.json.message).toMatch(/state/);
    expect((await e2b("GET", "/v2/sandboxes?nextToken=garbage")).status).toBe(400);
    expect((await e2b("POST", "/sandboxes/x/timeout", { timeout: -1 })).status).toBe(400);
    const fork = await e2b("POST", "/sandboxes/x/fork", {});
    expect(fork.status).toBe(400);
    expect(fork.json.message).toMatch(/not supported by Sandpit/);
    const none = await e2b("GET", "/no/such/route");
    expect(none.status).toBe(404);
    expect(none.json).toMatchObject({ code: 404 });
  });

  test(
    "the data plane: unknown sandbox 502, a wrong access token 401, a bad port 400",
    {
      timeout: 180_000,
    },
    async () => {
      const unknown = await fetch(`${base}/files?path=/x`, {
        headers: { "e2b-sandbox-id": "sbx-nope" },
      });
      expect(unknown.status).toBe(502);
      const sbx = await Sandbox.create(opts());
      const wrong = await fetch(`${base}/files?path=/x`, {
        headers: { "e2b-sandbox-id": sbx.sandboxId, "x-access-token": "not-the-token" },
      });
      expect(wrong.status).toBe(401);
      expect(await wrong.json()).toMatchObject({ code: 401 });
      const interp = await fetch(`${base}/contexts`, {
        headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999" },
      });
      expect(interp.status).toBe(401);
      const port = await fetch(`${base}/`, {
        headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "99999" },
      });
      expect(port.status).toBe(400);
      // An unsigned, header-less /files is no one's: 401.
      expect((await fetch(`${stack.prov.url}/files?path=/x&signature=v1_bad`)).status).toBe(401);
      await sbx.kill();
    },
  );

  test(
    "malformed data-plane requests on a real sandbox: E2B-shaped 4xx, never a 5xx",
    { timeout: 180_000 },
    async () => {
      const sbx = await Sandbox.create(opts());
      const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
      const send = (path: string, init: RequestInit & { port?: number } = {}) => {
        const headers = new Headers(init.headers);
        headers.set("e2b-sandbox-id", sbx.sandboxId);
        headers.set("e2b-sandbox-port", String(init.port ?? 49983));
        headers.set("x-access-token", token);
        return fetch(`${base}${path}`, { ...init, headers });
      };
      const json = { "content-type": "application/json" };
      const stream = { "content-type": "application/connect+json" };
      const cases: [string, Promise<Response>][] = [
        [
          "bad JSON",
          send("/filesystem.Filesystem/Stat", { method: "POST", headers: json, body: "{" }),
        ],
        [
          "wrong type",
          send("/filesystem.Filesystem/Stat", {
            method: "POST",
            headers: json,
            body: '{"path":7}',
          }),
        ],
        [
          "outside the jail",
          send("/filesystem.Filesystem/ListDir", {
            method: "POST",
            headers: json,
            body: '{"path":"/etc"}',
          }),
        ],
        [
          "unknown method",
          send("/process.Process/Nope", { method: "POST", headers: json, body: "{}" }),
        ],
        ["GET on a method", send("/process.Process/List")],
        [
          "wrong content type",
          send("/process.Process/List", {
            method: "POST",
            headers: { "content-type": "text/plain" },
            body: "{}",
          }),
        ],
        [
          "short envelope",
          send("/process.Process/Start", {
            method: "POST",
            headers: stream,
            body: new Uint8Array([0, 0, 0]),
          }),
        ],
        [
          "envelope past its body",
          send("/process.Process/Start", {
            method: "POST",
            headers: stream,
            body: new Uint8Array([0, 0, 0, 0, 9, 123]),
          }),
        ],
        // A path that a URL parser resolving it would read as a host ("<" is none): 500 once.
        ["a path like a host, envd", send("///%3C?a=b", { method: "PATCH" })],
        ["a path like a host, interpreter", send("///%3C", { port: 49999, method: "PATCH" })],
        ["/files without a path", send("/files")],
        ["/files of a directory", send("/files?path=/home/user")],
        [
          "/files bad content type",
          send("/files?path=x", {
            method: "POST",
            headers: { "content-type": "text/plain" },
            body: "x",
          }),
        ],
        [
          "/files truncated multipart",
          send("/files?path=x", {
            method: "POST",
            headers: { "content-type": "multipart/form-data; boundary=zz" },
            body: '--zz\r\nContent-Disposition: form-data; name="file"',
          }),
        ],
        [
          "/execute bad JSON",
          send("/execute", { port: 49999, method: "POST", headers: json, body: "{" }),
        ],
        [
          "/execute code not a string",
          send("/execute", { port: 49999, method: "POST", headers: json, body: '{"code":1}' }),
        ],
        [
          "/contexts unknown language",
          send("/contexts", {
            port: 49999,
            method: "POST",
            headers: json,
            body: '{"language":"cobol"}',
          }),
        ],
        ["/contexts unknown id", send("/contexts/nope", { port: 49999, method: "DELETE" })],
      ];
      // A streaming call that started answers 200 and carries its error in the end-of-stream
      // message (flag 0x02), as the Connect protocol says; never a 5xx.
      const noCmd = await send("/process.Process/Start", {
        method: "POST",
        headers: stream,
        body: new Uint8Array([0, 0, 0, 0, 2, 123, 125]),
      });
      const frame = Buffer.from(await noCmd.arrayBuffer());
      expect(noCmd.status).toBe(200);
      expect(frame[0]).toBe(2);
      expect(JSON.parse(frame.subarray(5).toString())).toMatchObject({
        error: { code: "invalid_argument" },
      });
      for (const [what, answer] of cases) {
        const res = await answer;
        const body = await res.text();
        expect(res.status, `${what}: ${body}`).toBeGreaterThanOrEqual(400);
        expect(res.status, `${what}: ${body}`).toBeLessThan(500);
        expect(body, what).not.toBe("");
      }
      await sbx.kill();
    },
  );

  test("host routing: api.<domain> is the control plane, <port>-<id>.<domain> a sandbox", async () => {
    const list = await getWithHost(`api.${DOMAIN}`, "/v2/sandboxes", { "x-api-key": KEY });
    expect(list.status).toBe(200);
    expect(Array.isArray(JSON.parse(list.body))).toBe(true);
    const unauthenticated = await getWithHost(`api.${DOMAIN}:443`, "/v2/sandboxes");
    expect(unauthenticated.status).toBe(401);
    const unknown = await getWithHost(`49983-sbx-nope.${DOMAIN}`, "/health");
    expect(unknown.status).toBe(502);
    expect(JSON.parse(unknown.body)).toMatchObject({ code: 502 });
    const stranger = await getWithHost(`www.${DOMAIN}`, "/");
    expect(stranger.status).toBe(404);
    // The native API is untouched on any other host.
    expect((await fetch(`${stack.prov.url}/healthz`)).status).toBe(200);
  });
});

describe("two replicas, one whose cache lags", () => {
  test(
    "isRunning() right after a kill served by the other replica says the sandbox is not running",
    { timeout: 240_000 },
    async () => {
      // `lagging` reaches the API server through a gate that holds its watch events back.
      const gate = await startWatchGate(inject("kubeconfig"));
      const lagging = await startProvisioner({
        kubeconfig: gate.kubeconfig,
        namespace: stack.ns,
        keys: KEYS,
        env: ENV,
      });
      try {
        const sbx = await Sandbox.create(opts());
        const url = `${lagging.url}/e2b`;
        const there = await Sandbox.connect(sbx.sandboxId, {
          ...opts(),
          apiUrl: url,
          sandboxUrl: url,
        });
        await waitFor("the lagging replica to see the sandbox", 30_000, () => there.isRunning());
        gate.hold();
        try {
          await sbx.kill();
          // Its cache still shows the sandbox; envd's /health is answered from a live read.
          expect(await there.isRunning()).toBe(false);
        } finally {
          gate.release();
        }
      } finally {
        await lagging.stop();
        await gate.close();
      }
    },
  );
});
