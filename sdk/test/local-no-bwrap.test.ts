/**
 * No silent loss of isolation: where bubblewrap does not work, the local provider refuses to
 * start a sandbox unless host execution was asked for by name (isolation "none"). Run in a
 * child process whose PATH has no `bwrap`, as on a host without it.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sandpit-no-bwrap-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Creates a sandbox in a process that cannot find bwrap; what it printed. */
function createWithoutBwrap(options: string, env: Record<string, string> = {}) {
  const script = `
    import { LocalProvider } from ${JSON.stringify(ENTRY)};
    const p = new LocalProvider({ baseDir: ${JSON.stringify(dir)}, warm: 0, ${options} });
    try {
      const s = await p.create({ language: "python" });
      console.log(JSON.stringify({ created: s.sandboxId }));
      await s.kill();
    } catch (err) {
      console.log(JSON.stringify({ code: err.code, message: err.message }));
    }
    await p.close();`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    // An empty directory: no bwrap to find (nor anything else the refusal would need).
    env: { PATH: dir, HOME: dir, ...env },
    encoding: "utf8",
    timeout: 30_000,
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as {
    created?: string;
    code?: string;
    message?: string;
  };
}

describe("local provider without bubblewrap", () => {
  it("refuses by default (auto), saying how to install it or opt in to host execution", () => {
    const out = createWithoutBwrap("");
    expect(out.created).toBeUndefined();
    expect(out.code).toBe("CONNECTION_FAILED");
    expect(out.message).toContain("apt-get install bubblewrap");
    expect(out.message).toContain("SANDPIT_LOCAL_ISOLATION=none");
  });

  it("refuses isolation 'bwrap' the same way, naming it", () => {
    const out = createWithoutBwrap('isolation: "bwrap"');
    expect(out.code).toBe("CONNECTION_FAILED");
    expect(out.message).toContain("isolation 'bwrap' was asked for");
  });

  it("refuses a SANDPIT_LOCAL_ISOLATION it does not know", () => {
    const out = createWithoutBwrap("", { SANDPIT_LOCAL_ISOLATION: "sometimes" });
    expect(out.code).toBe("INVALID_ARGUMENT");
    expect(out.message).toContain("SANDPIT_LOCAL_ISOLATION must be one of auto, bwrap, none");
  });

  it("goes past the isolation check only when host execution is asked for by name", () => {
    // With "none" the provider starts sandboxd, which this PATH cannot run: what matters is
    // that it got past the isolation check (a different error, not the refusal).
    for (const out of [
      createWithoutBwrap('isolation: "none"'),
      createWithoutBwrap("", { SANDPIT_LOCAL_ISOLATION: "none" }),
    ]) {
      expect(out.message ?? "").not.toContain("need bubblewrap");
    }
  });
});
