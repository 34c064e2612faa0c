/**
 * `sandpit exec` over an exec ticket (cli/src/fast-exec.ts) against the full path: the same
 * output and exit code, without loading commander, the config parser or a provider; and a
 * ticket that no longer reaches the sandbox falls back to the provider.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalProvider } from "@sandpit/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { plainExec } from "../src/fast-exec.ts";
import { CliHarness, MAIN, type Run } from "./harness.ts";

const MODULE_LOG_HOOK = fileURLToPath(new URL("./module-log.ts", import.meta.url));

let h: CliHarness;
let id: string;

beforeAll(async () => {
  h = new CliHarness();
  id = (await h.ok(["create"])).trim();
});
afterAll(() => h.cleanup());

/** A run of the CLI with its cache in `cache`, and the modules it loaded. */
function run(args: string[], cache: string): Promise<Run & { modules: string[] }> {
  const log = join(mkdtempSync(join(h.dir, "modules-")), "log");
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", MODULE_LOG_HOOK, MAIN, ...args], {
      cwd: h.cwd,
      env: h.env({ XDG_CACHE_HOME: cache, SANDPIT_MODULE_LOG: log }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.once("error", reject);
    child.once("close", (code) =>
      resolve({ code, stdout, stderr, modules: readFileSync(log, "utf8").split("\n") }),
    );
  });
}

const loadedCommander = (modules: string[]) => modules.some((m) => m.includes("/commander/"));
const loadedProvider = (modules: string[]) => modules.some((m) => m.includes("/providers/"));
/**
 * Built-ins the ticket path must not load, each several ms of a fresh process: TLS (a plain
 * sandboxd address needs none), crypto, and fs/promises with the readline and stream modules
 * an ESM import of node:fs pulls in.
 */
const HEAVY_BUILTINS = [
  "tls",
  "https",
  "crypto",
  "internal/fs/promises",
  "internal/readline/interface",
];
const heavyBuiltins = (modules: string[]) =>
  HEAVY_BUILTINS.filter((b) => modules.includes(`builtin:${b}`));

/** --json's durationMs differs run to run; everything else must not. */
function comparable(r: Run): Run {
  const stdout = r.stdout.startsWith("{")
    ? JSON.stringify({ ...JSON.parse(r.stdout), durationMs: 0 })
    : r.stdout;
  return { code: r.code, stdout, stderr: r.stderr };
}

describe("plainExec", () => {
  it("takes exec with --json and --config only; anything else is the full CLI's", () => {
    expect(plainExec(["exec", "a.b", "--", "ls", "-l"])).toEqual({
      id: "a.b",
      argv: ["ls", "-l"],
      json: false,
      config: undefined,
    });
    expect(plainExec(["--json", "exec", "-c", "x.yaml", "a.b", "true"])).toEqual({
      id: "a.b",
      argv: ["true"],
      json: true,
      config: "x.yaml",
    });
    expect(plainExec(["exec", "a.b", "--config=y.yaml", "--", "true"])?.config).toBe("y.yaml");
    for (const args of [
      ["exec", "-i", "a.b", "--", "cat"],
      ["exec", "a.b", "--cwd", "/", "--", "ls"],
      ["exec", "a.b", "--bogus", "true"],
      ["exec", "a.b"],
      ["exec", "--help"],
      ["ls"],
      ["-c"],
    ])
      expect(plainExec(args), args.join(" ")).toBeNull();
  });
});

describe("exec over a ticket", () => {
  it("gives the full path's output and exit code, without commander or a provider", async () => {
    const ticketed = join(h.dir, "ticketed");
    // The first exec goes through the provider and leaves the ticket behind.
    const first = await run(["exec", id, "--", "true"], ticketed);
    expect(first.code).toBe(0);
    expect(loadedCommander(first.modules)).toBe(true);
    // The full path does load them (so the check below can see them).
    expect(heavyBuiltins(first.modules)).not.toEqual([]);
    expect(readdirSync(join(ticketed, "sandpit", "exec"))).toHaveLength(1);

    const cases: { args: string[]; fast: boolean }[] = [
      { args: ["exec", id, "--", "true"], fast: true },
      { args: ["exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"], fast: true },
      { args: ["--json", "exec", id, "--", "sh -c 'echo out; echo err >&2; exit 4'"], fast: true },
      { args: ["exec", "nobody.none", "--", "true"], fast: false },
      { args: ["exec", id, "--bogus", "true"], fast: false },
    ];
    for (const { args, fast } of cases) {
      const empty = mkdtempSync(join(h.dir, "cache-"));
      const full = await run(args, empty); // no ticket: the provider path
      rmSync(empty, { recursive: true, force: true });
      const viaTicket = await run(args, ticketed);
      expect(comparable(viaTicket), args.join(" ")).toEqual(comparable(full));
      expect(loadedCommander(viaTicket.modules), args.join(" ")).toBe(!fast);
      if (fast) {
        expect(loadedProvider(viaTicket.modules)).toBe(false);
        expect(heavyBuiltins(viaTicket.modules), args.join(" ")).toEqual([]);
      }
    }
  });

  it("a ticket whose sandboxd is gone falls back to the provider, which starts it again", async () => {
    const cache = join(h.dir, "stale");
    expect((await run(["exec", id, "--", "true"], cache)).code).toBe(0);
    // Paused from outside the CLI: the ticket stays, its socket answers no more.
    const provider = new LocalProvider({ baseDir: join(h.dir, "state") });
    await (await provider.resume(id)).pause();
    await provider.close();
    const r = await run(["exec", id, "--", "echo", "back"], cache);
    expect(r).toMatchObject({ code: 0, stdout: "back\n", stderr: "" });
    expect(loadedCommander(r.modules)).toBe(true);
    // ...and the ticket written again serves the next run.
    const next = await run(["exec", id, "--", "echo", "again"], cache);
    expect(next).toMatchObject({ code: 0, stdout: "again\n" });
    expect(loadedCommander(next.modules)).toBe(false);
  });
});
