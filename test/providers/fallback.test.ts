/**
 * The fallback chain with a remote provider first: `use: [e2b, local]` where E2B cannot be
 * reached (its API URL is a closed 127.0.0.1 port) must give a local sandbox, and the log must
 * say why E2B was skipped.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProvider, parseConfig, SandboxError } from "@sandpit/sdk";
import { registerBuiltinProviders } from "../../sdk/src/providers/builtin.ts";
import { closedPort } from "../fakes/net.ts";

describe("fallback: e2b unreachable → local", () => {
  let baseDir: string;
  beforeAll(async () => {
    registerBuiltinProviders();
    registerBuiltinProviders(); // idempotent: a second call (another test file, the app) is harmless
    baseDir = await mkdtemp(join(tmpdir(), "sandpit-fallback-"));
  });
  afterAll(async () => {
    await rm(baseDir, { recursive: true, force: true });
  });

  it("takes the local provider and logs why e2b was skipped", async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(...chunk.toString().split("\n").filter(Boolean));
        done();
      },
    });
    const logger = pino({ level: "warn" }, sink);
    const dead = `http://127.0.0.1:${await closedPort()}`;
    const provider = createProvider(
      {
        use: ["e2b", "local"],
        e2b: { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: dead, sandboxUrl: dead },
        local: { baseDir, isolation: "none" },
      },
      { logger },
    );
    const sbx = await provider.create({ language: "python", threadId: "fallback1" });
    try {
      expect(sbx.sandboxId).toBe("default.fallback1"); // the local provider's ID scheme
      expect((await sbx.commands.run("echo from-local")).stdout).toBe("from-local\n");
    } finally {
      await sbx.kill();
    }
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const skipped = records.find((r) => r.provider === "e2b");
    expect(skipped, lines.join("\n")).toBeDefined();
    expect(skipped!.code).toBe("CONNECTION_FAILED");
    expect(String(skipped!.reason)).toContain("ECONNREFUSED");
    expect(String(skipped!.msg)).toContain("trying the next one");
  });

  it("validates remote provider options strictly in the config", () => {
    expect(() => parseConfig({ sandbox: { use: "e2b", e2b: { apiKey: "k", bogus: 1 } } })).toThrow(
      SandboxError,
    );
    expect(() =>
      parseConfig({ sandbox: { use: "daytona", daytona: { apiKey: "k", target: "mars" } } }),
    ).toThrow(/target/);
    expect(
      parseConfig({
        sandbox: { use: ["daytona", "e2b"], daytona: { apiKey: "k" }, e2b: { apiKey: "k" } },
      }).sandbox.use,
    ).toEqual(["daytona", "e2b"]);
  });
});
