/**
 * The provisioner's pure parts: settings, API keys, package specs and error mapping. The HTTP
 * API and the proxy are tested against the real cluster.
 */
import { PassThrough } from "node:stream";
import { describe, expect, test } from "vitest";
import { KeyRing } from "../src/api/auth.ts";
import { ApiError, endSocket, errorEnvelope, toApiError } from "../src/api/errors.ts";
import { readConfig } from "../src/config.ts";
import { SandboxUnavailable, externalSandboxName, threadSandboxName } from "../src/sandboxes.ts";

const KEYS = JSON.stringify([{ key: "k".repeat(24), tenant: "acme" }]);

describe("settings", () => {
  test("defaults, and keys with their quota", () => {
    const cfg = readConfig({ SANDPIT_API_KEYS: KEYS });
    expect(cfg.namespace).toBe("sandpit-sandboxes");
    expect(cfg.listen).toEqual({ host: "0.0.0.0", port: 8080 });
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
  ])("refuses %j with a message naming the setting", (env, message) => {
    expect(() => readConfig(env as NodeJS.ProcessEnv)).toThrow(message);
  });
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

describe("errors", () => {
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
