/**
 * The E2B-compatible API's pure parts: routing (prefix, sandbox headers, hosts, signed URLs),
 * envd access tokens, error shapes, request schemas, list filters and cursors, and what is read
 * back from a Sandbox. The routes themselves run against the cluster
 * (test/provisioner/e2b-control.test.ts).
 */
import { PassThrough } from "node:stream";
import { describe, expect, test } from "vitest";
import { readConfig } from "../src/config.ts";
import { ApiError } from "../src/api/errors.ts";
import {
  compareCursors,
  decodeCursor,
  encodeCursor,
  metadataFilter,
} from "../src/api/e2b/control.ts";
import { e2bAnswer, endSocketE2b } from "../src/api/e2b/errors.ts";
import { routeOf } from "../src/api/e2b/index.ts";
import {
  E2B_ANNOTATION,
  endAt,
  metadataOf,
  quantity,
  resourcesOf,
  stateOf,
  templateOf,
} from "../src/api/e2b/records.ts";
import { ListQuery, NewSandbox } from "../src/api/e2b/schemas.ts";
import { EnvdTokens } from "../src/api/e2b/tokens.ts";
import { type Sandbox, SandboxUnavailable } from "../src/sandboxes.ts";

const DOMAIN = "sbx.example.com";

describe("routing", () => {
  test("/e2b without sandbox headers is the control plane, path and query kept", () => {
    expect(routeOf("/e2b/v2/sandboxes?limit=2", {}, undefined)).toEqual({
      kind: "control",
      path: "/v2/sandboxes?limit=2",
    });
    expect(routeOf("/e2b", {}, undefined)).toEqual({ kind: "control", path: "/" });
  });

  test("E2b-Sandbox-Id makes it data plane, on E2b-Sandbox-Port or envd's 49983", () => {
    expect(routeOf("/e2b/process.Process/Start", { "e2b-sandbox-id": "sbx-1" }, undefined)).toEqual(
      { kind: "data", sandboxId: "sbx-1", port: 49983, path: "/process.Process/Start" },
    );
    expect(
      routeOf(
        "/e2b/execute?source=ci",
        { "e2b-sandbox-id": "sbx-1", "e2b-sandbox-port": "49999" },
        undefined,
      ),
    ).toEqual({ kind: "data", sandboxId: "sbx-1", port: 49999, path: "/execute?source=ci" });
  });

  test("a bad E2b-Sandbox-Port is refused with a 400", () => {
    for (const port of ["0", "65536", "80a", "-1"]) {
      const r = routeOf("/e2b/", { "e2b-sandbox-id": "s", "e2b-sandbox-port": port }, undefined);
      expect(r?.kind).toBe("refused");
      expect(r?.kind === "refused" && r.error.status).toBe(400);
    }
  });

  test("paths outside /e2b are not the E2B API's, /e2bx included", () => {
    expect(routeOf("/v1/sandboxes", {}, undefined)).toBeUndefined();
    expect(routeOf("/e2bx/sandboxes", {}, undefined)).toBeUndefined();
    expect(routeOf("/healthz", { host: `api.${DOMAIN}x` }, DOMAIN)).toBeUndefined();
    // Without a configured domain, hosts mean nothing.
    expect(routeOf("/v2/sandboxes", { host: `api.${DOMAIN}` }, undefined)).toBeUndefined();
  });

  test("signed /files URLs route without headers, at the root and under /e2b", () => {
    const q = "?path=%2Fa&username=user&signature=v1_abc&signature_expiration=99";
    expect(routeOf(`/files${q}`, {}, undefined)).toEqual({
      kind: "signed-files",
      path: `/files${q}`,
    });
    expect(routeOf(`/e2b/files${q}`, {}, undefined)).toEqual({
      kind: "signed-files",
      path: `/files${q}`,
    });
    // Unsigned, header-less /files is neither (the native API answers 404 for it).
    expect(routeOf("/files?path=/a", {}, undefined)).toBeUndefined();
  });

  test("host routing: api.<domain> is control, <port>-<id>.<domain> data, any case and port", () => {
    expect(routeOf("/v2/sandboxes", { host: `API.${DOMAIN}:443` }, DOMAIN)).toEqual({
      kind: "control",
      path: "/v2/sandboxes",
    });
    expect(routeOf("/health", { host: `49983-sbx-0a1b.${DOMAIN}` }, DOMAIN)).toEqual({
      kind: "data",
      sandboxId: "sbx-0a1b",
      port: 49983,
      path: "/health",
    });
    expect(routeOf("/ws?x=1", { host: `3000-sbx-0a1b.${DOMAIN}.` }, DOMAIN)).toEqual({
      kind: "data",
      sandboxId: "sbx-0a1b",
      port: 3000,
      path: "/ws?x=1",
    });
    // Host routing wins over the headers and the prefix on a sandbox host.
    expect(
      routeOf("/e2b/x", { host: `8080-a.${DOMAIN}`, "e2b-sandbox-id": "b" }, DOMAIN),
    ).toMatchObject({ kind: "data", sandboxId: "a", port: 8080, path: "/e2b/x" });
  });

  test("other hosts under the domain are refused with a 404", () => {
    for (const host of [`www.${DOMAIN}`, `70000-a.${DOMAIN}`, `1-a.b.${DOMAIN}`, `x-a.${DOMAIN}`]) {
      const r = routeOf("/", { host }, DOMAIN);
      expect(r?.kind).toBe("refused");
      expect(r?.kind === "refused" && r.error.status).toBe(404);
    }
  });
});

describe("envd access tokens", () => {
  const tokens = new EnvdTokens("s".repeat(40));

  test("derived from the secret and the sandbox's uid: stable, distinct per sandbox", () => {
    const a = tokens.forUid("uid-a");
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(tokens.forUid("uid-a")).toBe(a);
    expect(new EnvdTokens("s".repeat(40)).forUid("uid-a")).toBe(a); // another replica
    expect(tokens.forUid("uid-b")).not.toBe(a);
    expect(new EnvdTokens("t".repeat(40)).forUid("uid-a")).not.toBe(a);
  });

  test("matches only the sandbox's own token", () => {
    const a = tokens.forUid("uid-a");
    expect(tokens.matches("uid-a", a)).toBe(true);
    expect(tokens.matches("uid-b", a)).toBe(false);
    expect(tokens.matches("uid-a", `${a}x`)).toBe(false);
    expect(tokens.matches("uid-a", "")).toBe(false);
    expect(tokens.matches("uid-a", undefined)).toBe(false);
  });

  test("a traffic token is not an envd token, nor the reverse", () => {
    const envd = tokens.forUid("uid-a");
    const traffic = tokens.forUid("uid-a", "traffic");
    expect(traffic).not.toBe(envd);
    expect(tokens.matches("uid-a", traffic, "traffic")).toBe(true);
    expect(tokens.matches("uid-a", traffic)).toBe(false);
    expect(tokens.matches("uid-a", envd, "traffic")).toBe(false);
  });
});

describe("E2B error shapes", () => {
  test("{code: status, message} with the native API's statuses", () => {
    expect(e2bAnswer(new ApiError("NOT_FOUND", 'sandbox "x" not found'))).toEqual({
      status: 404,
      body: { code: 404, message: 'sandbox "x" not found' },
      retryAfterS: undefined,
    });
    expect(e2bAnswer(new ApiError("UNAUTHORIZED", "unknown API key")).body.code).toBe(401);
    expect(e2bAnswer({ type: "entity.parse.failed", message: "bad" }).status).toBe(400);
    expect(e2bAnswer(new Error("boom"))).toMatchObject({
      status: 500,
      body: { code: 500, message: "internal error" },
    });
  });

  test("a key's quota is 429 without Retry-After; a pool at its cap keeps it", () => {
    const quota = e2bAnswer(new SandboxUnavailable("quota", "may hold 1 sandboxes at once", 30));
    expect(quota).toEqual({
      status: 429,
      body: { code: 429, message: "may hold 1 sandboxes at once" },
      retryAfterS: undefined,
    });
    const capacity = e2bAnswer(new SandboxUnavailable("capacity", "pool at its cap", 5));
    expect(capacity.status).toBe(429);
    expect(capacity.retryAfterS).toBe(5);
  });

  test("a refused upgrade gets the same body on its socket", async () => {
    const socket = new PassThrough();
    let written = "";
    socket.on("data", (b: Buffer) => (written += b.toString()));
    endSocketE2b(socket, new ApiError("NOT_FOUND", "nope"));
    await new Promise((r) => socket.on("end", r));
    expect(written).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
    expect(written.endsWith('\r\n\r\n{"code":404,"message":"nope"}')).toBe(true);
  });
});

describe("request schemas", () => {
  test("a create as the SDKs send it", () => {
    const b = NewSandbox.parse({
      templateID: "base",
      timeout: 300,
      metadata: { a: "b" },
      envVars: { K: "v" },
      autoPause: false,
      network: { allowPublicTraffic: true },
      unknownField: 1,
    });
    expect(b).toMatchObject({ templateID: "base", timeout: 300, metadata: { a: "b" } });
    expect("unknownField" in b).toBe(false);
  });

  test.each([
    [{}, /templateID/],
    [{ templateID: "base", timeout: -1 }, /timeout/],
    [{ templateID: "base", timeout: 1.5 }, /timeout/],
    [{ templateID: "base", envVars: { "1BAD": "x" } }, /envVars/],
    [{ templateID: "base", metadata: { k: 7 } }, /metadata/],
    [{ templateID: "base", mcp: { github: {} } }, /mcp .*not supported/],
    [{ templateID: "base", volumeMounts: [{ name: "v", path: "/v" }] }, /volumeMounts .*not/],
    [{ templateID: "base", network: { denyOut: ["0.0.0.0/0"] } }, /network: only/],
    [{ templateID: "base", network: { allowPublicTraffic: false } }, /network/],
  ])("refused: %j", (body, message) => {
    const r = NewSandbox.safeParse(body);
    expect(r.success).toBe(false);
    const text = r.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    expect(text).toMatch(message);
  });

  test("network allow and deny lists are refused as not supported (clients map that to NOT_SUPPORTED)", () => {
    const r = NewSandbox.safeParse({
      templateID: "base",
      network: { allowOut: ["10.0.0.0/8"], denyOut: ["0.0.0.0/0"] },
    });
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.message).join("; ")).toMatch(/not supported by Sandpit/);
  });

  test("empty forms of unsupported features pass", () => {
    expect(
      NewSandbox.safeParse({ templateID: "base", mcp: null, volumeMounts: [], iam: {} }).success,
    ).toBe(true);
  });

  test("list query: comma-separated or repeated states, limit bounds", () => {
    expect(ListQuery.parse({ state: "running,paused", limit: "7" })).toMatchObject({
      state: ["running", "paused"],
      limit: 7,
    });
    expect(ListQuery.parse({ state: ["paused", "running"] }).state).toEqual(["paused", "running"]);
    expect(ListQuery.safeParse({ state: "asleep" }).success).toBe(false);
    expect(ListQuery.safeParse({ limit: "0" }).success).toBe(false);
    expect(ListQuery.safeParse({ limit: "101" }).success).toBe(false);
    expect(ListQuery.safeParse({ limit: "ten" }).success).toBe(false);
    expect(ListQuery.safeParse({ metadata: ["a=b", "c=d"] }).success).toBe(false);
  });
});

describe("list filters and pagination", () => {
  test("metadata as the SDK encodes it: pairs, each part URI-encoded, then as a query", () => {
    const wanted = { "odd key": "a&b=c", plain: "v" };
    const sent = new URLSearchParams(
      Object.entries(wanted).map(
        ([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)] as [string, string],
      ),
    ).toString();
    expect(Object.fromEntries(metadataFilter(sent))).toEqual(wanted);
    expect(metadataFilter(undefined)).toEqual([]);
    // Encoded once (a literal % in the value): taken as decoded once, not refused.
    expect(metadataFilter("k=50%25")).toEqual([["k", "50%"]]);
  });

  test("cursors order by start then name, survive a round trip, and reject forgeries", () => {
    expect(compareCursors([1, "a"], [2, "a"], "asc")).toBeLessThan(0);
    expect(compareCursors([1, "a"], [2, "a"], "desc")).toBeGreaterThan(0);
    expect(compareCursors([1, "a"], [1, "b"], "asc")).toBeLessThan(0);
    expect(decodeCursor(encodeCursor([1700000000000, "sbx-1"]))).toEqual([1700000000000, "sbx-1"]);
    for (const bad of ["", "garbage", Buffer.from('{"a":1}').toString("base64url")])
      expect(() => decodeCursor(bad)).toThrow(/nextToken/);
  });
});

describe("what a Sandbox says in E2B's terms", () => {
  const sandbox = (over: Partial<Sandbox> = {}): Sandbox =>
    ({
      apiVersion: "sandpit.dev/v1alpha1",
      kind: "Sandbox",
      metadata: {
        name: "sbx-1",
        uid: "u1",
        creationTimestamp: "2030-01-01T00:00:00Z",
        annotations: {},
        ...over.metadata,
      },
      spec: { ...over.spec },
      status: { ...over.status },
    }) as Sandbox;

  test("template, metadata and state", () => {
    expect(templateOf(sandbox())).toBe("base");
    expect(templateOf(sandbox({ spec: { poolRef: "py" } } as Partial<Sandbox>))).toBe("py");
    const s = sandbox({
      metadata: {
        name: "x",
        annotations: {
          [E2B_ANNOTATION.template]: "code-interpreter-v1",
          [E2B_ANNOTATION.metadata]: '{"a":"b","n":1}',
        },
      },
    });
    expect(templateOf(s)).toBe("code-interpreter-v1");
    expect(metadataOf(s)).toEqual({ a: "b" }); // non-strings dropped
    expect(
      metadataOf(
        sandbox({ metadata: { name: "x", annotations: { [E2B_ANNOTATION.metadata]: "{" } } }),
      ),
    ).toEqual({});
    expect(stateOf(sandbox({ status: { phase: "Ready" } }))).toBe("running");
    expect(stateOf(sandbox({ status: { phase: "Suspended" } }))).toBe("paused");
    expect(
      stateOf(sandbox({ spec: { lifecycle: { suspended: true } }, status: { phase: "Ready" } })),
    ).toBe("paused");
  });

  test("endAt: from the spec's lifetime, or last activity + idle timeout when auto-pausing", () => {
    const created = Date.parse("2030-01-01T00:00:00Z");
    expect(
      endAt(sandbox({ spec: { lifecycle: { ttlSeconds: 600, suspended: false } } })).getTime(),
    ).toBe(created + 600_000);
    expect(endAt(sandbox({ status: { expiresAt: "2030-01-02T00:00:00Z" } })).toISOString()).toBe(
      "2030-01-02T00:00:00.000Z",
    );
    const pausing = sandbox({
      metadata: { name: "x", annotations: { [E2B_ANNOTATION.onTimeout]: "pause" } },
      spec: { lifecycle: { idleTimeoutSeconds: 120, suspended: false } },
      status: { lastActivityTime: "2030-01-01T01:00:00Z" },
    });
    expect(endAt(pausing).toISOString()).toBe("2030-01-01T01:02:00.000Z");
  });

  test("resources: the sandbox's, else the pool's, else the operator's defaults", () => {
    expect(quantity("500m")).toBe(0.5);
    expect(quantity("2Gi")).toBe(2 ** 31);
    expect(quantity("1.5")).toBe(1.5);
    expect(quantity("bogus")).toBe(0);
    expect(resourcesOf(sandbox(), undefined)).toEqual({
      cpuCount: 1,
      memoryMB: 1024,
      diskSizeMB: 1024,
    });
    expect(
      resourcesOf(sandbox({ spec: { resources: { cpu: "1500m" } } } as Partial<Sandbox>), {
        spec: { template: { resources: { memory: "512Mi" }, storage: { size: "10Gi" } } },
      } as never),
    ).toEqual({ cpuCount: 2, memoryMB: 512, diskSizeMB: 10240 });
  });
});

describe("settings", () => {
  const KEYS = JSON.stringify([{ key: "k".repeat(24), tenant: "acme", maxTimeoutSeconds: 3600 }]);

  test("the E2B API is off without its secret, on with it, with an optional domain", () => {
    expect(readConfig({ SANDPIT_API_KEYS: KEYS }).e2b).toBeUndefined();
    const cfg = readConfig({
      SANDPIT_API_KEYS: KEYS,
      SANDPIT_E2B_TOKEN_SECRET: "x".repeat(32),
      SANDPIT_E2B_DOMAIN: "sbx.example.com",
    });
    expect(cfg.e2b).toEqual({ tokenSecret: "x".repeat(32), domain: "sbx.example.com" });
    expect(cfg.keys[0]!.maxTimeoutSeconds).toBe(3600);
  });

  test.each([
    [{ SANDPIT_E2B_TOKEN_SECRET: "short" }, /SANDPIT_E2B_TOKEN_SECRET: at least 32/],
    [{ SANDPIT_E2B_DOMAIN: "sbx.example.com" }, /needs SANDPIT_E2B_TOKEN_SECRET/],
    [
      { SANDPIT_E2B_TOKEN_SECRET: "x".repeat(32), SANDPIT_E2B_DOMAIN: "Bad_Domain" },
      /SANDPIT_E2B_DOMAIN: a lowercase DNS name/,
    ],
  ])("refused: %j", (env, message) => {
    expect(() => readConfig({ SANDPIT_API_KEYS: KEYS, ...env })).toThrow(message);
  });
});
