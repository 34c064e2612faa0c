/**
 * E2B error mapping, through real SDK calls: the loopback fake answers 401, 429, 404, 503,
 * stalls, drops a stream, or is not there at all, and the provider must turn what the SDK
 * throws into the right SandboxError code with the SDK's error as `cause`.
 */
import {
  AuthenticationError,
  FileNotFoundError,
  NotFoundError,
  RateLimitError,
  SandboxError as E2BSandboxError,
  SandboxNotFoundError,
  ServiceBusyError,
  TimeoutError,
} from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxError, type SandboxInstance } from "@sandpit/sdk";
import { E2BProvider, type E2BProviderOptions } from "@sandpit/sdk/e2b";
import { e2bErrorCode, fromE2B, fromE2BStart } from "../../sdk/src/providers/e2b/errors.ts";
import { FakeE2B } from "../fakes/e2b.ts";
import { closedPort } from "../fakes/net.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { expectSandboxError } from "../contract/suite.ts";

const usable = await bwrapUsable();
if (!usable)
  console.warn(
    "bubblewrap is not available: skipping the E2B error-mapping tests (the fake runs sandboxes in bubblewrap)",
  );

const title = `E2B errors → SandboxError codes${usable ? "" : " (skipped: bubblewrap is not available)"}`;
describe.skipIf(!usable)(title, () => {
  let fake: FakeE2B;
  let sbx: SandboxInstance;
  const provider = (extra: Partial<E2BProviderOptions> = {}) =>
    new E2BProvider({
      apiKey: fake.apiKey,
      apiUrl: fake.url,
      sandboxUrl: fake.url,
      domain: "sandbox.test",
      ...extra,
    });

  beforeAll(async () => {
    fake = new FakeE2B();
    await fake.start();
    sbx = await provider().create({ language: "python" });
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
    await fake?.close();
  });

  it("401 from the API → UNAUTHORIZED (AuthenticationError)", async () => {
    const err = await expectSandboxError(
      provider({ apiKey: `e2b_${"1".repeat(40)}` }).create({ language: "python" }),
      "UNAUTHORIZED",
    );
    expect(err.cause).toBeInstanceOf(AuthenticationError);
    expect(err.message).toMatch(/E2B: .*failed/);
  });

  it("429 from the API → RATE_LIMITED (RateLimitError)", async () => {
    fake.server.inject({
      method: "GET",
      path: /^\/v2\/sandboxes$/,
      status: 429,
      body: { code: 429, message: "slow down" },
    });
    const err = await expectSandboxError(provider().create({ language: "python" }), "RATE_LIMITED");
    expect(err.cause).toBeInstanceOf(RateLimitError);
  });

  it("429 from envd → RATE_LIMITED", async () => {
    fake.server.inject({
      method: "GET",
      path: /^\/files$/,
      status: 429,
      body: { code: 429, message: "slow down" },
    });
    const err = await expectSandboxError(sbx.filesystem.read("anything.txt"), "RATE_LIMITED");
    expect(err.cause).toBeInstanceOf(RateLimitError);
  });

  it("400 'not supported' from the API → NOT_SUPPORTED, any other 400 → INVALID_ARGUMENT", async () => {
    fake.server.inject({
      method: "POST",
      path: /^\/v2\/sandboxes$/,
      status: 400,
      body: { code: 400, message: "body.network: allow lists are not supported by this API" },
    });
    const refused = await expectSandboxError(
      provider().create({ language: "python", threadId: "refused-1" }),
      "NOT_SUPPORTED",
    );
    expect(refused.message).toContain("e2b");
    fake.server.inject({
      method: "POST",
      path: /^\/v2\/sandboxes$/,
      status: 400,
      body: { code: 400, message: "body.timeout: must be a whole number" },
    });
    await expectSandboxError(
      provider().create({ language: "python", threadId: "refused-2" }),
      "INVALID_ARGUMENT",
    );
  });

  it("404 on connect → NOT_FOUND (SandboxNotFoundError)", async () => {
    const err = await expectSandboxError(provider().resume("no-such-sandbox"), "NOT_FOUND");
    expect(err.cause).toBeInstanceOf(SandboxNotFoundError);
  });

  it("404 from envd for a file → NOT_FOUND (FileNotFoundError)", async () => {
    const err = await expectSandboxError(sbx.filesystem.read("missing.txt"), "NOT_FOUND");
    expect(err.cause).toBeInstanceOf(NotFoundError);
    expect(err.cause).toBeInstanceOf(FileNotFoundError);
  });

  it("503 from the API → CONNECTION_FAILED (ServiceBusyError), so a fallback chain moves on", async () => {
    fake.server.inject({
      method: "GET",
      path: /^\/v2\/sandboxes$/,
      status: 503,
      body: { code: 503, message: "busy" },
    });
    const err = await expectSandboxError(
      provider().create({ language: "python" }),
      "CONNECTION_FAILED",
    );
    expect(err.cause).toBeInstanceOf(ServiceBusyError);
  });

  it("a stalled API request past requestTimeoutMs → TIMEOUT", async () => {
    // The fake never answers: only the client's own timeout ends the call.
    fake.server.inject({ method: "GET", path: /^\/v2\/sandboxes$/, hang: true });
    await expectSandboxError(
      provider({ requestTimeoutMs: 400 }).create({ language: "python" }),
      "TIMEOUT",
    );
  });

  it("a command past its deadline → TIMEOUT (TimeoutError), and the process is killed", async () => {
    const err = await expectSandboxError(
      sbx.commands.run("sleep 20.25; echo late > late.txt", { timeoutMs: 300 }),
      "TIMEOUT",
    );
    expect(err.cause).toBeInstanceOf(TimeoutError);
    // The kill reaches the sandbox after the client gave up: wait for it, bounded.
    const left = () => sbx.commands.run("pgrep -f '[s]leep 20.25' || echo none");
    let seen = (await left()).stdout.trim();
    for (const deadline = Date.now() + 10_000; seen !== "none" && Date.now() < deadline;) {
      await new Promise((r) => setTimeout(r, 100));
      seen = (await left()).stdout.trim();
    }
    expect(seen).toBe("none");
  });

  it("a dropped command stream → CONNECTION_FAILED", async () => {
    // Let the start event through (5-byte envelope header + JSON), then cut the connection.
    fake.server.inject({
      method: "POST",
      path: /^\/process\.Process\/Start$/,
      drop: true,
      dropAfterBytes: 30,
    });
    await expectSandboxError(sbx.commands.run("sleep 1; echo done"), "CONNECTION_FAILED");
  });

  it("a dropped connection before any answer → CONNECTION_FAILED", async () => {
    fake.server.inject({ method: "GET", path: /^\/v2\/sandboxes$/, drop: true });
    const err = await expectSandboxError(
      provider().create({ language: "python" }),
      "CONNECTION_FAILED",
    );
    expect(err.cause).toBeDefined();
  });

  it("nothing listening (ECONNREFUSED) → CONNECTION_FAILED", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const err = await expectSandboxError(
      new E2BProvider({ apiKey: fake.apiKey, apiUrl: url, sandboxUrl: url }).create({
        language: "python",
      }),
      "CONNECTION_FAILED",
    );
    expect(err.message).toContain("ECONNREFUSED");
  });

  it("no room in the sandbox → CAPACITY_EXCEEDED: resource_exhausted on a start, 507 from the interpreter", () => {
    // envd's resource_exhausted, as the SDK raises it: a rate limit anywhere but on a start.
    const exhausted = new RateLimitError("at most 200 background processes: Rate limit exceeded");
    expect(fromE2BStart(exhausted, "starting a command")).toMatchObject({
      code: "CAPACITY_EXCEEDED",
      cause: exhausted,
    });
    expect(fromE2BStart(exhausted, "starting a command").message).toContain("200");
    expect(fromE2B(exhausted, "listing processes").code).toBe("RATE_LIMITED");
    expect(fromE2BStart(new NotFoundError("gone"), "x").code).toBe("NOT_FOUND");
    // The code interpreter's errors carry only the status.
    expect(e2bErrorCode(new E2BSandboxError("507 Insufficient Storage"))).toBe("CAPACITY_EXCEEDED");
  });

  it("keeps SandboxErrors as they are and maps unknown errors to INTERNAL", () => {
    expect(e2bErrorCode(new SandboxError("x", "CONFLICT"))).toBe("CONFLICT");
    expect(e2bErrorCode(new Error("something else"))).toBe("INTERNAL");
  });
});
