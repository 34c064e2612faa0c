/**
 * @sandpit/sdk as a user gets it: `npm pack`ed, installed into a project outside the repository
 * with nothing but its own dependencies (no e2b, @daytonaio/sdk, dockerode or node-pty), on Node
 * 22 and Node 24, loaded with `import` and with `require()`, and type-checked against its
 * shipped declarations. The first run downloads the two Node versions into the user's cache.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureNode, NODE_VERSIONS } from "./node-versions.ts";
import { makeConsumer, packTarballs, REPO_ROOT, type Consumer } from "./project.ts";

let tarballs: string[];
const made: string[] = [];

beforeAll(async () => {
  tarballs = await packTarballs(["sdk"]);
  made.push(join(tarballs[0]!, ".."));
}, 300_000);

afterAll(async () => {
  for (const dir of made) await rm(dir, { recursive: true, force: true });
});

/** What flow.cjs prints, parsed; and asserts it printed nothing else. */
function onlyLine(stdout: string): Record<string, Record<string, unknown>> {
  const lines = stdout.split("\n").filter(Boolean);
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0]!) as Record<string, Record<string, unknown>>;
}

describe.each(NODE_VERSIONS)("a consumer project on Node %s", (version) => {
  let consumer: Consumer;

  beforeAll(async () => {
    consumer = await makeConsumer(await ensureNode(version), tarballs);
    made.push(consumer.dir);
  }, 600_000);

  it("installs the SDK and its own dependencies only", () => {
    const nm = join(consumer.dir, "node_modules");
    expect(existsSync(join(nm, "@sandpit", "sdk", "dist", "sdk", "src", "index.js"))).toBe(true);
    for (const pkg of [
      "e2b",
      "@e2b/code-interpreter",
      "@daytonaio/sdk",
      "dockerode",
      "node-pty",
      "pino",
    ])
      expect(existsSync(join(nm, pkg)), pkg).toBe(false);
  });

  it.each(["esm.mjs", "cjs.cjs"])(
    "%s runs Python and TypeScript on the local provider, with nothing on stdout but its own",
    async (entry) => {
      const { stdout, stderr } = await consumer.exec(
        entry,
        [join(consumer.dir, "sandboxes", entry)],
        { SANDPIT_LOG_LEVEL: undefined },
      );
      const out = onlyLine(stdout);
      expect(out.python).toMatchObject({ success: true, stdout: "42\n" });
      expect(out.typescript).toMatchObject({ success: true, stdout: "42\n" });
      expect(out.command).toMatchObject({ exitCode: 0, stdout: "42\n" });
      // The unreachable first provider of the chain is a warning, and warnings go to stderr.
      expect(stderr).toMatch(/^sandpit warn: .*kubernetes/m);
      // Terminals need node-pty, an optional peer: the error says so.
      expect(out.pty).toMatchObject({ sandboxError: true, code: "NOT_SUPPORTED" });
      expect(out.pty!.message).toContain("npm install node-pty");
    },
  );

  it("says which package to install for a provider whose SDK is missing", async () => {
    const { stdout } = await consumer.exec("esm.mjs", [join(consumer.dir, "sandboxes", "missing")]);
    const { missing } = onlyLine(stdout);
    const install = {
      e2b: "npm install e2b @e2b/code-interpreter",
      e2bFactory: "npm install e2b @e2b/code-interpreter",
      daytona: "npm install @daytonaio/sdk",
      docker: "npm install dockerode",
    };
    for (const [name, command] of Object.entries(install)) {
      const err = missing![name] as { sandboxError: boolean; code: string; message: string };
      expect(err, name).toMatchObject({ sandboxError: true, code: "NOT_SUPPORTED" });
      expect(err.message, name).toContain(command);
    }
  });
});

describe("the shipped type declarations", () => {
  it("type-check a typed consumer, ESM and CommonJS, with the repository's tsc", async () => {
    const consumer = await makeConsumer(await ensureNode(NODE_VERSIONS[1]), [
      ...tarballs,
      join(REPO_ROOT, "node_modules", "@types", "node"),
    ]);
    made.push(consumer.dir);
    const tsc = join(REPO_ROOT, "node_modules", "typescript", "bin", "tsc");
    const r = await promisify(execFile)(process.execPath, [tsc, "-p", consumer.dir], {
      cwd: consumer.dir,
    }).catch((err: { stdout: string; code: number }) => err);
    expect("code" in r ? r.stdout : "").toBe("");
  }, 300_000);
});
