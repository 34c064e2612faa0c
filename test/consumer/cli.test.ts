/**
 * @sandpit/cli as a user gets it: the SDK and CLI tarballs (scripts/pack.ts) installed into a
 * project outside the repository on Node 22 and Node 24, and the installed `sandpit` bin run as
 * a person runs it: version and help, a sandbox's life on the local provider (create, exec with
 * its exit code, ls --json, rm), bad flags, and `sandpit serve --backend local` answering the
 * native API with the URL and key it prints, then stopping on SIGTERM with nothing of its own
 * left running. One install per Node version, shared by its tests.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeState } from "../serve/harness.ts";
import { ensureNode, NODE_VERSIONS } from "./node-versions.ts";
import { makeConsumer, packTarballs, REPO_ROOT, type Consumer } from "./project.ts";

let tarballs: string[];
const made: string[] = [];

beforeAll(async () => {
  tarballs = await packTarballs(["sdk", "cli"]);
  made.push(join(tarballs[0]!, ".."));
}, 300_000);

afterAll(async () => {
  for (const dir of made) await rm(dir, { recursive: true, force: true });
});

const CLI_VERSION = (
  JSON.parse(await readFile(join(REPO_ROOT, "cli", "package.json"), "utf8")) as { version: string }
).version;

/** Processes whose command line names `dir` or whose working directory is under it. */
async function processesUnder(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    const cwd = await readlink(`/proc/${pid}/cwd`).catch(() => "");
    if (cmd.includes(dir) || cwd.startsWith(dir)) found.push(`${pid} ${cmd.replaceAll("\0", " ")}`);
  }
  return found;
}

/** processesUnder(dir), once it is empty or 10 s have passed (exits are not instant). */
async function leftBehind(dir: string): Promise<string[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const left = await processesUnder(dir);
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Stderr's non-empty lines. */
const lines = (text: string) => text.split("\n").filter(Boolean);

describe.each(NODE_VERSIONS)("the installed sandpit CLI on Node %s", (version) => {
  let consumer: Consumer;
  let sandboxes: string;
  /** The local provider, its sandboxes inside the project: the config file a user writes. */
  const env = { SANDPIT_PROVIDER: undefined, SANDPIT_CONFIG: undefined, SANDPIT_DEBUG: undefined };

  beforeAll(async () => {
    consumer = await makeConsumer(await ensureNode(version), tarballs);
    made.push(consumer.dir);
    sandboxes = join(consumer.dir, "sandboxes");
    await writeFile(
      join(consumer.dir, "sandpit.yaml"),
      `sandbox:\n  use: local\n  local:\n    baseDir: ${JSON.stringify(sandboxes)}\n`,
    );
  }, 600_000);

  // A failed run's sandboxes are stopped (the project is removed with the rest).
  afterAll(async () => {
    if (consumer) await removeState(consumer.dir);
  });

  it("installs the sandpit bin, the SDK beside it, and none of the repository's private packages", async () => {
    const nm = join(consumer.dir, "node_modules");
    expect(existsSync(join(nm, ".bin", "sandpit"))).toBe(true);
    expect((await readdir(join(nm, "@sandpit"))).sort()).toEqual(["cli", "sdk"]);
    // serve and what it needs of the provisioner, operator and sandboxd: one built file.
    expect(existsSync(join(nm, "@sandpit", "cli", "dist", "serve.js"))).toBe(true);
  });

  it("prints its version and its help, exit 0", async () => {
    const v = await consumer.bin("sandpit", ["--version"], env);
    expect(v).toMatchObject({ code: 0, stdout: `${CLI_VERSION}\n` });
    const h = await consumer.bin("sandpit", ["--help"], env);
    expect(h.code).toBe(0);
    for (const command of ["create", "exec", "ls", "rm", "serve", "mcp"])
      expect(h.stdout).toMatch(new RegExp(`^  ${command}\\b`, "m"));
    const s = await consumer.bin("sandpit", ["serve", "--help"], env);
    expect(s.code).toBe(0);
    expect(s.stdout).toContain("--backend");
  });

  it(
    "creates a local sandbox, runs Python in it with the exit code passed through, lists it as JSON, removes it",
    { timeout: 180_000 },
    async () => {
      const created = await consumer.bin("sandpit", ["create", "-l", "python"], env);
      expect(created.code, created.stderr).toBe(0);
      const id = created.stdout.trim();
      expect(id).toMatch(/^\S+$/);

      const ran = await consumer.bin(
        "sandpit",
        ["exec", id, "--", "python3", "-c", "import sys; print(6 * 7); sys.exit(7)"],
        env,
      );
      expect(ran).toMatchObject({ code: 7, stdout: "42\n" });

      const listed = await consumer.bin("sandpit", ["ls", "--json"], env);
      expect(listed.code, listed.stderr).toBe(0);
      const all = JSON.parse(listed.stdout) as { sandboxId: string; provider: string }[];
      expect(all).toContainEqual(expect.objectContaining({ sandboxId: id, provider: "local" }));

      const removed = await consumer.bin("sandpit", ["rm", id], env);
      expect(removed.code, removed.stderr).toBe(0);
      const after = JSON.parse((await consumer.bin("sandpit", ["ls", "--json"], env)).stdout) as {
        sandboxId: string;
      }[];
      expect(after.map((s) => s.sandboxId)).not.toContain(id);
      expect(await leftBehind(sandboxes)).toEqual([]);
    },
  );

  it.each([
    [["create", "--bogus"], /^sandpit: unknown option '--bogus'/],
    [["frobnicate"], /^sandpit: unknown command 'frobnicate'/],
    [["exec"], /^sandpit: missing required argument/],
    [["serve", "--port", "nope"], /^sandpit serve: --port: expected a whole number/],
  ])("refuses %j with a non-zero exit and one line on stderr", async (args, message) => {
    const r = await consumer.bin("sandpit", args, env);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(message);
  });

  it(
    "serves the native API on local sandboxes with the URL, key and first sandbox it prints, and stops on SIGTERM leaving nothing running",
    { timeout: 180_000 },
    async () => {
      const stateDir = await mkdtemp(join(tmpdir(), "sandpit-consumer-serve-"));
      const child = spawn(
        join(consumer.dir, "node_modules", ".bin", "sandpit"),
        [
          "serve",
          "--backend",
          "local",
          "--host",
          "127.0.0.1",
          "--port",
          "0",
          "--state-dir",
          stateDir,
        ],
        {
          cwd: consumer.dir,
          env: {
            ...consumer.env,
            ...env,
            SANDPIT_API_KEYS: undefined,
            SANDPIT_API_KEYS_FILE: undefined,
          },
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let stderr = "";
      child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
      const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
      try {
        const printed: Record<string, string> = {};
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(
            () => reject(new Error(`serve did not start:\n${stderr}`)),
            60_000,
          );
          void exited.then((code) => {
            clearTimeout(timer);
            reject(new Error(`serve exited (${code}) before serving:\n${stderr}`));
          });
          createInterface({ input: child.stdout }).on("line", (line) => {
            const [k, ...v] = line.split("=");
            printed[k!] = v.join("=");
            // The first sandbox (Python and TypeScript run in it) is printed last.
            if (printed.SANDPIT_URL && printed.SANDPIT_API_KEY && printed.SANDPIT_SANDBOX_ID) {
              clearTimeout(timer);
              resolve();
            }
          });
        });
        const url = printed.SANDPIT_URL!;
        expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
        const auth = { authorization: `Bearer ${printed.SANDPIT_API_KEY}` };
        const post = (path: string, body: unknown) =>
          fetch(`${url}${path}`, {
            method: "POST",
            headers: { ...auth, "content-type": "application/json" },
            body: JSON.stringify(body),
          });

        const created = await post("/v1/sandboxes", { language: "python" });
        const sandbox = (await created.json()) as { id: string; phase: string };
        expect(created.status, JSON.stringify(sandbox)).toBe(201);
        expect(sandbox.phase).toBe("Ready");
        const ran = await post(
          `/v1/sandboxes/${encodeURIComponent(sandbox.id)}/proxy/v1/commands/run`,
          {
            command: "python3 -c 'print(6 * 7)'",
          },
        );
        expect(ran.status).toBe(200);
        expect(await ran.json()).toMatchObject({ exitCode: 0, stdout: "42\n" });
        // Without the key: the API refuses.
        expect((await fetch(`${url}/v1/sandboxes`)).status).toBe(401);

        expect(stderr).toMatch(/first sandbox/i);
        const listed = (await (await fetch(`${url}/v1/sandboxes`, { headers: auth })).json()) as {
          sandboxes: { id: string }[];
        };
        expect(listed.sandboxes.map((x) => x.id).sort()).toEqual(
          [printed.SANDPIT_SANDBOX_ID!, sandbox.id].sort(),
        );

        // Removed through the API, then serve stopped: serve leaves nothing of its own running.
        for (const id of [sandbox.id, printed.SANDPIT_SANDBOX_ID!]) {
          const removed = await fetch(`${url}/v1/sandboxes/${encodeURIComponent(id)}`, {
            method: "DELETE",
            headers: auth,
          });
          expect(removed.status).toBeLessThan(300);
        }
        child.kill("SIGTERM");
        expect(await exited).toBe(0);
        expect(await leftBehind(stateDir)).toEqual([]);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
        // Local sandboxes outlive serve by design: a failed run's are stopped here.
        await removeState(stateDir);
      }
    },
  );
});
