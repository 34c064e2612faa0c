/**
 * The provisioner's pure parts: settings, API keys, package specs and error mapping. The HTTP
 * API and the proxy are tested against the real cluster.
 */
import { PassThrough } from "node:stream";
import { describe, expect, test } from "vitest";
import { KeyRing } from "../src/api/auth.ts";
import { ApiError, endSocket, errorEnvelope, toApiError } from "../src/api/errors.ts";
import { readConfig } from "../src/config.ts";
import { KubeApiError } from "@sandpit/operator/kube/client";
import { deerflowStatus, placeMounts } from "../src/api/deerflow.ts";
import { DeerFlowCreate } from "../src/api/schemas.ts";
import {
  type Sandbox,
  SandboxUnavailable,
  externalSandboxName,
  identity,
  labelSafe,
  threadSandboxName,
} from "../src/sandboxes.ts";

const KEYS = JSON.stringify([{ key: "k".repeat(24), tenant: "acme" }]);

describe("settings", () => {
  test("defaults, and keys with their quota", () => {
    const cfg = readConfig({ SANDPIT_API_KEYS: KEYS });
    expect(cfg.namespace).toBe("sandpit-sandboxes");
    expect(cfg.listen).toEqual({ host: "0.0.0.0", port: 8080 });
    expect(cfg.metricsListen).toEqual({ host: "0.0.0.0", port: 9090 });
    expect(cfg.keys).toEqual([{ key: "k".repeat(24), tenant: "acme", maxSandboxes: 100 }]);
    expect(cfg.activityIntervalMs).toBe(15_000);
  });

  test.each([
    [{}, /SANDPIT_API_KEYS: no API keys/],
    [{ SANDPIT_API_KEYS: "not json" }, /SANDPIT_API_KEYS: must be a JSON list/],
    [
      { SANDPIT_API_KEYS: JSON.stringify([{ key: "short", tenant: "a" }]) },
      /at least 24 characters/,
    ],
    [
      { SANDPIT_API_KEYS: JSON.stringify([{ key: "k".repeat(24), tenant: "Bad_Tenant" }]) },
      /tenant: lowercase/,
    ],
    [{ SANDPIT_API_KEYS: KEYS, SANDPIT_LISTEN: "8080" }, /SANDPIT_LISTEN: expected host:port/],
    [
      { SANDPIT_API_KEYS: KEYS, SANDPIT_DEERFLOW_MOUNTS: "{not json" },
      /SANDPIT_DEERFLOW_MOUNTS: must be a JSON object/,
    ],
    [
      { SANDPIT_API_KEYS: KEYS, SANDPIT_DEERFLOW_MOUNTS: '["skills"]' },
      /SANDPIT_DEERFLOW_MOUNTS: must be a JSON object/,
    ],
    [
      {
        SANDPIT_API_KEYS: KEYS,
        SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({ "/mnt/skills": { claimName: "Skills_Claim" } }),
      },
      /SANDPIT_DEERFLOW_MOUNTS\[\/mnt\/skills\]\.claimName: claimName is a PersistentVolumeClaim name/,
    ],
    [
      {
        SANDPIT_API_KEYS: KEYS,
        SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({ "/mnt/../etc": { claimName: "skills" } }),
      },
      /SANDPIT_DEERFLOW_MOUNTS\[\/mnt\/\.\.\/etc\]\.mountPath: mountPath has no/,
    ],
    [
      {
        SANDPIT_API_KEYS: KEYS,
        SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({ "/tmp/skills": { claimName: "skills" } }),
      },
      /SANDPIT_DEERFLOW_MOUNTS\[\/tmp\/skills\]\.mountPath: mountPath may not cover/,
    ],
    [
      {
        SANDPIT_API_KEYS: KEYS,
        SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({ "/mnt/s": { claimName: "s", size: "1Gi" } }),
      },
      /SANDPIT_DEERFLOW_MOUNTS\[\/mnt\/s\]: .*size/,
    ],
  ])("refuses %j with a message naming the setting", (env, message) => {
    expect(() => readConfig(env as NodeJS.ProcessEnv)).toThrow(message);
  });
});

test("SANDPIT_DEERFLOW_MOUNTS: container path -> claim, none by default", () => {
  expect(readConfig({ SANDPIT_API_KEYS: KEYS }).deerflowMounts).toEqual([]);
  const cfg = readConfig({
    SANDPIT_API_KEYS: KEYS,
    SANDPIT_DEERFLOW_MOUNTS: JSON.stringify({
      "/mnt/skills/custom": { claimName: "deerflow-skills", readOnly: true },
      "/mnt/acp-workspace": {
        claimName: "deerflow-data",
        subPath: "users/{user}/threads/{thread}",
      },
    }),
  });
  expect(cfg.deerflowMounts).toEqual([
    { mountPath: "/mnt/skills/custom", claimName: "deerflow-skills", readOnly: true },
    {
      mountPath: "/mnt/acp-workspace",
      claimName: "deerflow-data",
      subPath: "users/{user}/threads/{thread}",
    },
  ]);
});

describe("API keys", () => {
  const ring = new KeyRing([
    { key: "a".repeat(30), tenant: "one", maxSandboxes: 1 },
    { key: "b".repeat(30), tenant: "two", maxSandboxes: 2 },
  ]);
  test("each key finds its own tenant; others find none", () => {
    expect(ring.find("a".repeat(30))?.tenant).toBe("one");
    expect(ring.find("b".repeat(30))?.tenant).toBe("two");
    expect(ring.find("a".repeat(29))).toBeUndefined();
    expect(ring.find("")).toBeUndefined();
    expect(ring.find(undefined)).toBeUndefined();
  });
});

describe("names", () => {
  test("one name per (tenant, user, thread); none without a thread", () => {
    const a = threadSandboxName("acme", "u1", "t1");
    expect(a).toMatch(/^sbx-[0-9a-f]{20}$/);
    expect(threadSandboxName("acme", "u1", "t1")).toBe(a);
    expect(threadSandboxName("acme", "u2", "t1")).not.toBe(a);
    expect(threadSandboxName("other", "u1", "t1")).not.toBe(a);
    expect(threadSandboxName("acme", "u1", undefined)).toBeUndefined();
    expect(externalSandboxName("acme", "any id at all / with spaces")).toMatch(/^df-[0-9a-f]{20}$/);
  });
});

describe("ids in labels", () => {
  const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;
  // make_safe_user_id of an email: the sanitised address, '-', 16 hex digits.
  const email = `${"a".repeat(60)}-example-com-0123456789abcdef`;
  test("a valid label value is kept; anything else becomes a stable hash no id can equal", () => {
    expect(labelSafe("alice")).toBe("alice");
    for (const id of [email, "-lead", "trail_", "x".repeat(64), "y".repeat(255)]) {
      const v = labelSafe(id);
      expect(v, id).toMatch(LABEL_VALUE);
      expect(v, id).toMatch(/^h\.[0-9a-f]{40}$/);
      expect(labelSafe(id)).toBe(v);
    }
    expect(labelSafe("-a")).not.toBe(labelSafe("-b"));
  });
  test("identity keeps the ids as given in annotations and label-safe values in labels", () => {
    expect(identity(email, "-t_")).toEqual({
      labels: { "sandpit.dev/user": labelSafe(email), "sandpit.dev/thread": labelSafe("-t_") },
      annotations: { "sandpit.dev/user-id": email, "sandpit.dev/thread-id": "-t_" },
    });
    expect(identity("u", undefined)).toEqual({
      labels: { "sandpit.dev/user": "u" },
      annotations: { "sandpit.dev/user-id": "u" },
    });
  });
});

describe("DeerFlow's create", () => {
  const mount = (container_path: string, read_only = true) => ({
    host_path: `/app/backend/.deer-flow/users/u/x${container_path}`,
    container_path,
    read_only,
  });
  test("takes every shape DeerFlow sends: null thread, long and odd ids, extra_mounts", () => {
    const body = DeerFlowCreate.parse({
      sandbox_id: "0123456789abcdef",
      thread_id: null,
      user_id: `-${"u".repeat(200)}_`,
      include_legacy_skills: false,
      provision_lark_cli_runtime: false,
      provision_lark_cli_broker: false,
      extra_mounts: [
        mount("/mnt/acp-workspace"),
        mount("/mnt/skills/custom"),
        mount("/mnt/skills/integrations"),
        mount("/mnt/integrations/lark-cli/config"),
        mount("/mnt/integrations/lark-cli/config/locks", false),
        mount("/mnt/integrations/lark-cli/data", false),
      ],
    });
    expect(body.thread_id).toBeNull();
    expect(placeMounts(body.extra_mounts!, []).emptyDirs).toEqual([
      "/mnt/acp-workspace",
      "/mnt/skills/custom",
      "/mnt/skills/integrations",
      "/mnt/integrations/lark-cli/config",
      "/mnt/integrations/lark-cli/config/locks",
      "/mnt/integrations/lark-cli/data",
    ]);
    expect(DeerFlowCreate.parse({ sandbox_id: "abc", user_id: null }).user_id).toBe("default");
  });
  test("a path the settings map becomes that claim, read-only if either side says so", () => {
    const volumes = [
      { mountPath: "/mnt/skills/custom", claimName: "skills", readOnly: true },
      { mountPath: "/mnt/acp-workspace", claimName: "data", subPath: "{user}/{thread}" },
      { mountPath: "/mnt/integrations/lark-cli/data", claimName: "lark" },
      { mountPath: "/mnt/not-asked", claimName: "other" },
    ];
    expect(
      placeMounts(
        [
          mount("/mnt/acp-workspace"), // DeerFlow: read-only; the setting: read-write
          mount("/mnt/skills/custom", false), // the setting: read-only
          mount("/mnt/skills/integrations"),
          mount("/mnt/integrations/lark-cli/data", false), // read-write on both sides
        ],
        volumes,
      ),
    ).toEqual({
      emptyDirs: ["/mnt/skills/integrations"],
      mounts: [
        {
          mountPath: "/mnt/acp-workspace",
          claimName: "data",
          subPath: "{user}/{thread}",
          readOnly: true,
        },
        { mountPath: "/mnt/skills/custom", claimName: "skills", readOnly: true },
        { mountPath: "/mnt/integrations/lark-cli/data", claimName: "lark" },
      ],
    });
  });
  test.each([
    [{ sandbox_id: "" }, /sandbox_id/],
    [{ sandbox_id: "a/b" }, /sandbox_id/],
    [{ sandbox_id: "x".repeat(256) }, /sandbox_id/],
    [{ sandbox_id: "a", user_id: "a b" }, /user_id/],
    [{ sandbox_id: "a", thread_id: "t".repeat(256) }, /thread_id/],
    [
      { sandbox_id: "a", extra_mounts: Array.from({ length: 11 }, (_, i) => mount(`/mnt/m${i}`)) },
      /at most 10/,
    ],
    [{ sandbox_id: "a", extra_mounts: [mount("/mnt/a"), mount("/mnt/a")] }, /at most once/],
    [{ sandbox_id: "a", extra_mounts: [mount("/etc")] }, /under \/mnt/],
    [{ sandbox_id: "a", extra_mounts: [mount("/mnt/user-data/x")] }, /not \/mnt\/user-data/],
    [{ sandbox_id: "a", extra_mounts: [{ container_path: "/mnt/a" }] }, /host_path/],
    [{ sandbox_id: "a", extra_mounts: [{ ...mount("/mnt/a"), read_only: "yes" }] }, /read_only/],
  ])("refuses %j", (body, message) => {
    const r = DeerFlowCreate.safeParse(body);
    expect(r.success).toBe(false);
    expect(JSON.stringify(r.error!.issues)).toMatch(message);
  });
  test("a sandbox that serves or will serve its sandbox_url is Running, a suspended one too", () => {
    const at = (phase: string | undefined, capacity = false) =>
      ({
        metadata: { name: "x" },
        spec: {},
        ...(phase
          ? {
              status: {
                phase,
                ...(capacity
                  ? {
                      conditions: [
                        {
                          type: "CapacityExceeded",
                          status: "True",
                          reason: "AtCap",
                          message: "",
                          lastTransitionTime: "2026-01-01T00:00:00Z",
                        },
                      ],
                    }
                  : {}),
              },
            }
          : {}),
      }) as Sandbox;
    for (const phase of [undefined, "Pending", "Starting", "Ready", "Suspended"])
      expect(deerflowStatus(at(phase)), String(phase)).toBe("Running");
    expect(deerflowStatus(at("Failed"))).toBe("Failed");
    expect(deerflowStatus(at("Pending", true))).toBe("Pending");
  });
});

describe("errors", () => {
  test("the API server's refusals are answered in our words, never its paths or messages", () => {
    const leak =
      'Sandbox.sandpit.dev "df-0123" is invalid: metadata.labels: Invalid value: "-x": /apis/sandpit.dev/v1alpha1/namespaces/ns/sandboxes';
    for (const [status, code, http] of [
      [422, "INVALID_ARGUMENT", 400],
      [400, "INVALID_ARGUMENT", 400],
      [404, "NOT_FOUND", 404],
      [409, "CONFLICT", 409],
      [429, "RATE_LIMITED", 429],
      [403, "INTERNAL", 500],
      [500, "INTERNAL", 500],
    ] as const) {
      const e = toApiError(new KubeApiError(status, "Invalid", leak));
      expect([e.code, e.status], String(status)).toEqual([code, http]);
      expect(e.message).not.toMatch(/apis|sandpit\.dev|metadata|df-0123|Invalid value/);
    }
  });

  test("a pool at its cap is 429 with Retry-After; a failed sandbox 409; a timeout 504", () => {
    const cap = toApiError(new SandboxUnavailable("capacity", "full", 5));
    expect([cap.status, cap.code, cap.retryAfterS]).toEqual([429, "CAPACITY_EXCEEDED", 5]);
    expect(toApiError(new SandboxUnavailable("failed", "x")).status).toBe(409);
    expect(toApiError(new SandboxUnavailable("timeout", "x")).status).toBe(504);
  });
  test("body parser errors are the client's", () => {
    expect(
      toApiError(Object.assign(new Error("big"), { type: "entity.too.large", status: 413 })).status,
    ).toBe(413);
    expect(
      toApiError(Object.assign(new Error("bad"), { type: "entity.parse.failed", status: 400 }))
        .code,
    ).toBe("INVALID_ARGUMENT");
  });
  test("a code answers with its shared default status unless one is given", () => {
    expect(new ApiError("UPSTREAM_UNAVAILABLE", "x").status).toBe(502);
    expect(new ApiError("NOT_FOUND", "x").status).toBe(404);
    expect(new ApiError("PAYLOAD_TOO_LARGE", "x", { status: 431 }).status).toBe(431);
  });
  test("a raw socket gets the same envelope as a response, with Retry-After", async () => {
    const e = new ApiError("CAPACITY_EXCEEDED", "pool full", { retryAfterS: 5 });
    expect(errorEnvelope(e)).toEqual({
      error: { code: "CAPACITY_EXCEEDED", message: "pool full" },
    });
    const socket = new PassThrough();
    endSocket(socket, e);
    const text = (await socket.toArray()).join("");
    const [head, body] = text.split("\r\n\r\n");
    expect(head).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\n/);
    expect(head).toContain("retry-after: 5\r\n");
    expect(JSON.parse(body!)).toEqual(errorEnvelope(e));
  });
  test("anything unexpected is a 500 that says nothing internal", () => {
    const e = toApiError(new Error("secret detail"));
    expect(e).toBeInstanceOf(ApiError);
    expect([e.status, e.message]).toEqual([500, "internal error"]);
  });
});
