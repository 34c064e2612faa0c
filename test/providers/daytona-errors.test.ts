/**
 * Daytona error mapping, through real `@daytonaio/sdk` calls: the loopback fake answers 401,
 * 429, 404, 408, 503, stalls, drops a log stream, or is not there at all, and the provider
 * must turn what the SDK throws into the right SandboxError code with the SDK's error as cause.
 */
import {
  DaytonaAuthenticationError,
  DaytonaNotFoundError,
  DaytonaRateLimitError,
  DaytonaServiceUnavailableError,
  DaytonaTimeoutError,
} from "@daytonaio/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxError, type SandboxInstance } from "@sandpit/sdk";
import { DaytonaProvider, type DaytonaProviderOptions } from "@sandpit/sdk/daytona";
import { daytonaErrorCode } from "../../sdk/src/providers/daytona/errors.ts";
import { FakeDaytona } from "../fakes/daytona.ts";
import { bwrapUsable } from "../fakes/sandbox-host.ts";
import { expectSandboxError } from "../contract/suite.ts";
import { closedPort } from "../fakes/net.ts";

const usable = await bwrapUsable();
if (!usable)
  console.warn(
    "bubblewrap is not available: skipping the Daytona error-mapping tests (the fake runs sandboxes in bubblewrap)",
  );

const title = `Daytona errors → SandboxError codes${usable ? "" : " (skipped: bubblewrap is not available)"}`;
describe.skipIf(!usable)(title, () => {
  let fake: FakeDaytona;
  let sbx: SandboxInstance;
  const provider = (extra: Partial<DaytonaProviderOptions> = {}) =>
    new DaytonaProvider({
      apiKey: fake.apiKey,
      apiUrl: fake.apiUrl,
      target: "us",
      useDeprecatedPolling: true,
      ...extra,
    });

  beforeAll(async () => {
    fake = new FakeDaytona();
    await fake.start();
    sbx = await provider().create({ language: "python" });
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
    await fake?.close();
  });

  it("401 → UNAUTHORIZED (DaytonaAuthenticationError)", async () => {
    const err = await expectSandboxError(
      provider({ apiKey: "wrong" }).create({ language: "python" }),
      "UNAUTHORIZED",
    );
    expect(err.cause).toBeInstanceOf(DaytonaAuthenticationError);
    expect(err.message).toMatch(/Daytona: .*failed/);
  });

  it("429 → RATE_LIMITED (DaytonaRateLimitError)", async () => {
    fake.server.inject({
      method: "POST",
      path: /^\/api\/sandbox$/,
      status: 429,
      body: { statusCode: 429, message: "Too many requests", code: "TOO_MANY_REQUESTS" },
    });
    const err = await expectSandboxError(
      provider().create({ language: "python", threadId: "rate-limited" }),
      "RATE_LIMITED",
    );
    expect(err.cause).toBeInstanceOf(DaytonaRateLimitError);
  });

  it("404 on resume → NOT_FOUND (DaytonaNotFoundError)", async () => {
    const err = await expectSandboxError(provider().resume("no-such-sandbox"), "NOT_FOUND");
    expect(err.cause).toBeInstanceOf(DaytonaNotFoundError);
  });

  it("a missing file (multipart error part) → NOT_FOUND (DaytonaNotFoundError)", async () => {
    const err = await expectSandboxError(sbx.filesystem.read("missing.txt"), "NOT_FOUND");
    expect(err.cause).toBeInstanceOf(DaytonaNotFoundError);
  });

  it("408 from the daemon → TIMEOUT (DaytonaTimeoutError)", async () => {
    fake.server.inject({
      method: "GET",
      path: /\/files$/,
      status: 408,
      body: { statusCode: 408, message: "request timeout", code: "REQUEST_TIMEOUT" },
    });
    const err = await expectSandboxError(sbx.filesystem.list("."), "TIMEOUT");
    expect(err.cause).toBeInstanceOf(DaytonaTimeoutError);
  });

  it("503 → CONNECTION_FAILED (DaytonaServiceUnavailableError), so a fallback chain moves on", async () => {
    fake.server.inject({
      method: "POST",
      path: /^\/api\/sandbox$/,
      status: 503,
      body: { statusCode: 503, message: "unavailable" },
    });
    const err = await expectSandboxError(
      provider().create({ language: "python", threadId: "busy" }),
      "CONNECTION_FAILED",
    );
    expect(err.cause).toBeInstanceOf(DaytonaServiceUnavailableError);
  });

  it("a stalled create past the lifecycle timeout (seconds, rounded up) → TIMEOUT", async () => {
    fake.server.inject({ method: "POST", path: /^\/api\/sandbox$/, hang: true });
    const started = Date.now();
    await expectSandboxError(
      provider({ timeoutMs: 700 }).create({ language: "python", threadId: "stalled" }),
      "TIMEOUT",
    );
    // 700 ms becomes Math.ceil(0.7) = 1 s on the wire.
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("a command past its deadline → TIMEOUT, and its process group is killed in the sandbox", async () => {
    await expectSandboxError(
      sbx.commands.run("sleep 20.75; echo late", { timeoutMs: 300 }),
      "TIMEOUT",
    );
    expect((await sbx.commands.run("pgrep -f '[s]leep 20.75' || echo none")).stdout.trim()).toBe(
      "none",
    );
  });

  it("a dropped log stream → CONNECTION_FAILED", async () => {
    fake.server.inject({ method: "WS", path: /\/logs$/, drop: true });
    await expectSandboxError(sbx.commands.run("echo hi"), "CONNECTION_FAILED");
  });

  it("a dropped connection before any answer → CONNECTION_FAILED", async () => {
    fake.server.inject({ method: "POST", path: /^\/api\/sandbox$/, drop: true });
    await expectSandboxError(
      provider().create({ language: "python", threadId: "dropped" }),
      "CONNECTION_FAILED",
    );
  });

  it("nothing listening (ECONNREFUSED) → CONNECTION_FAILED", async () => {
    const url = `http://127.0.0.1:${await closedPort()}/api`;
    const err = await expectSandboxError(
      new DaytonaProvider({
        apiKey: "k",
        apiUrl: url,
        target: "eu",
        useDeprecatedPolling: true,
      }).create({ language: "python" }),
      "CONNECTION_FAILED",
    );
    expect(err.message).toContain("ECONNREFUSED");
  });

  it("keeps SandboxErrors as they are and maps unknown errors to INTERNAL", () => {
    expect(daytonaErrorCode(new SandboxError("x", "CONFLICT"))).toBe("CONFLICT");
    expect(daytonaErrorCode(new Error("something else"))).toBe("INTERNAL");
  });
});
