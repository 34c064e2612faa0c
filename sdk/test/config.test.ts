/** Config parsing, provider selection by name, and the fallback chain, on real providers. */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  createProvider,
  FallbackProvider,
  loadConfigFile,
  LocalProvider,
  parseConfig,
  providerNames,
  registerProvider,
  SandboxError,
} from "@sandpit/sdk";
import { expectSandboxError } from "../../test/contract/suite.ts";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sandpit-config-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function configError(input: unknown): string {
  try {
    parseConfig(input);
  } catch (err) {
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as SandboxError).code).toBe("INVALID_ARGUMENT");
    return (err as Error).message;
  }
  throw new Error("expected the config to be rejected");
}

describe("config", () => {
  it("accepts one provider or an ordered list", () => {
    expect(parseConfig({ sandbox: { use: "local" } }).sandbox.use).toBe("local");
    expect(
      parseConfig({ sandbox: { use: ["local"], local: { isolation: "none" } } }).sandbox.use,
    ).toEqual(["local"]);
  });

  it.each([
    [{ sandbox: { use: "local" }, extra: 1 }, 'unknown key "extra"'],
    [{ sandbox: { use: "local", timeout: 5 } }, 'sandbox: unknown key "timeout"'],
    [
      { sandbox: { use: "local", local: { basedir: "/x" } } },
      'sandbox.local: unknown key "basedir"',
    ],
    [{ sandbox: { use: "local", local: { isolation: "chroot" } } }, "sandbox.local.isolation"],
    [{ sandbox: { use: "nope" } }, 'unknown provider "nope" (registered: local'],
    [{ sandbox: { use: [] } }, "use lists at least one provider"],
    [{ sandbox: {} }, "sandbox.use"],
    [{}, "sandbox"],
    ["just a string", "(root)"],
  ])("rejects %j, naming the problem", (input, expected) => {
    expect(configError(input)).toContain(expected);
  });

  it("loads YAML, and says clearly when the file is missing or malformed", async () => {
    const good = join(dir, "good.yaml");
    await writeFile(
      good,
      `sandbox:\n  use: local\n  local:\n    isolation: none\n    baseDir: ${join(dir, "base")}\n`,
    );
    expect((await loadConfigFile(good)).sandbox.local).toMatchObject({ isolation: "none" });
    const bad = join(dir, "bad.yaml");
    await writeFile(bad, "sandbox: [unclosed\n");
    expect((await expectSandboxError(loadConfigFile(bad), "INVALID_ARGUMENT")).message).toContain(
      "not valid YAML",
    );
    expect(
      (await expectSandboxError(loadConfigFile(join(dir, "missing.yaml")), "INVALID_ARGUMENT"))
        .message,
    ).toContain("cannot read");
  });

  it("switches provider with sandbox.use and runs code on it", async () => {
    const provider = createProvider({
      use: "local",
      local: { baseDir: join(dir, "use-local"), isolation: "none" },
    });
    const sbx = await provider.create({ language: "python" });
    expect((await sbx.executeCode("print(2 ** 10)", "python")).output).toBe(1024);
    await sbx.kill();
  });
});

describe("registry", () => {
  it("adds a provider with one registration, options validated strictly", async () => {
    registerProvider({
      name: "scratch",
      description: "local sandboxes under a fixed scratch directory (test provider)",
      options: z.strictObject({ root: z.string() }),
      create: (o) => new LocalProvider({ baseDir: o.root, isolation: "none" }),
    });
    expect(providerNames()).toContain("scratch");
    expect(configError({ sandbox: { use: "scratch", scratch: { rooot: "/x" } } })).toContain(
      'unknown key "rooot"',
    );
    const provider = createProvider({ use: "scratch", scratch: { root: join(dir, "scratch") } });
    const sbx = await provider.create({ language: "python" });
    expect((await sbx.commands.run("echo registered")).stdout).toBe("registered\n");
    await sbx.kill();
    expect(() =>
      registerProvider({
        name: "scratch",
        description: "",
        options: z.strictObject({}),
        create: () => provider,
      }),
    ).toThrow(/already registered/);
  });
});

describe("fallback chain", () => {
  it("falls through a provider that cannot be reached, and logs why", async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: "warn" },
      new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }),
    );
    // A sandboxd that cannot start in 1 ms is a provider that cannot be reached: CONNECTION_FAILED.
    const unreachable = new LocalProvider({
      baseDir: join(dir, "unreachable"),
      isolation: "none",
      startTimeoutMs: 1,
    });
    const working = new LocalProvider({ baseDir: join(dir, "working"), isolation: "none" });
    const chain = new FallbackProvider(
      [
        { name: "first", provider: unreachable },
        { name: "second", provider: working },
      ],
      logger,
    );
    const sbx = await chain.create({ language: "python", threadId: "fb" });
    expect((await sbx.commands.run("echo from-second")).stdout).toBe("from-second\n");
    const log = lines.map((l) => JSON.parse(l) as { provider: string; code: string; msg: string });
    expect(log).toHaveLength(1);
    expect(log[0]).toMatchObject({ provider: "first", code: "CONNECTION_FAILED" });
    expect(log[0]!.msg).toContain("trying the next one");
    // resume finds the sandbox on whichever provider has it.
    expect((await chain.resume(sbx.sandboxId)).sandboxId).toBe(sbx.sandboxId);
    await sbx.kill();
    await working.close();
  });

  it("does not fall through on other errors", async () => {
    const logger = pino({ level: "silent" });
    const chain = new FallbackProvider(
      [
        {
          name: "only",
          provider: new LocalProvider({ baseDir: join(dir, "x"), isolation: "none" }),
        },
      ],
      logger,
    );
    await expectSandboxError(chain.create({ language: "fortran" as "python" }), "INVALID_ARGUMENT");
  });

  it("reports every reason when no provider answers", async () => {
    const logger = pino({ level: "silent" });
    const p = (name: string) => ({
      name,
      provider: new LocalProvider({
        baseDir: join(dir, name),
        isolation: "none",
        startTimeoutMs: 1,
      }),
    });
    const chain = [p("a"), p("b")];
    try {
      const err = await expectSandboxError(
        new FallbackProvider(chain, logger).create({ language: "python" }),
        "CONNECTION_FAILED",
      );
      expect(err.message).toMatch(/a: .*\n\s+b: /s);
    } finally {
      // Their warm pools may be starting a process in the background (which also fails to start
      // in 1 ms): closing waits for it, so nothing writes under the directory removed after.
      await Promise.all(chain.map((c) => c.provider.close()));
    }
  });
});
