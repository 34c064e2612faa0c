/**
 * Live smoke tests against the real services. They run only when credentials are present
 * (E2B_API_KEY, DAYTONA_API_KEY; optionally DAYTONA_API_URL / DAYTONA_TARGET) and are
 * reported as skipped otherwise. They create real (billed) sandboxes and always kill them.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { SandboxProvider } from "@sandpit/sdk";
import { DaytonaProvider } from "@sandpit/sdk/daytona";
import { E2BProvider } from "@sandpit/sdk/e2b";

const e2bKey = process.env.E2B_API_KEY;
const daytonaKey = process.env.DAYTONA_API_KEY;
const unset = (name: string, key: string | undefined) =>
  key ? "" : ` (skipped: ${name} is not set)`;
if (!e2bKey) console.warn("live E2B tests SKIPPED: E2B_API_KEY is not set");
if (!daytonaKey) console.warn("live Daytona tests SKIPPED: DAYTONA_API_KEY is not set");

function smoke(name: string, make: () => SandboxProvider): void {
  it(`${name}: create, command, files, code, pause/resume, kill`, async () => {
    const provider = make();
    const sbx = await provider.create({
      language: "python",
      threadId: `live-${randomUUID().slice(0, 8)}`,
      envs: { LIVE_VAR: "yes" },
    });
    try {
      expect(await sbx.commands.run('echo "$LIVE_VAR"; echo err >&2; exit 2')).toEqual({
        exitCode: 2,
        stdout: "yes\n",
        stderr: "err\n",
      });
      expect((await sbx.commands.run("pwd")).stdout.trim()).toBe("/mnt/user-data/workspace");
      await sbx.filesystem.write("live/a.txt", "héllo");
      expect(await sbx.filesystem.read("/mnt/user-data/workspace/live/a.txt")).toBe("héllo");
      expect((await sbx.filesystem.list("live")).map((e) => e.name)).toEqual(["a.txt"]);
      const py = await sbx.executeCode('import json\nprint(json.dumps({"n": 6 * 7}))', "python");
      expect(py.output).toEqual({ n: 42 });
      const bad = await sbx.executeCode('raise ValueError("live")', "python");
      expect(bad.error?.name).toBe("ValueError");
      const ts = await sbx.executeCode(
        "const n: number = 2;\nconsole.log(JSON.stringify(n * 21));",
        "typescript",
      );
      expect(ts.output).toBe(42);
      expect(await sbx.getHost(8080)).toMatch(/^[^/]+:\d+$/);
      await sbx.pause();
      const back = await provider.resume(sbx.sandboxId);
      expect(back.sandboxId).toBe(sbx.sandboxId);
      expect(await back.filesystem.read("live/a.txt")).toBe("héllo");
    } finally {
      await sbx.kill();
    }
  }, 600_000);
}

describe.skipIf(!e2bKey)(`live E2B${unset("E2B_API_KEY", e2bKey)}`, () => {
  smoke(
    "e2b",
    () =>
      new E2BProvider({
        apiKey: e2bKey!,
        ...(process.env.E2B_DOMAIN ? { domain: process.env.E2B_DOMAIN } : {}),
      }),
  );
});

describe.skipIf(!daytonaKey)(`live Daytona${unset("DAYTONA_API_KEY", daytonaKey)}`, () => {
  smoke(
    "daytona",
    () =>
      new DaytonaProvider({
        apiKey: daytonaKey!,
        ...(process.env.DAYTONA_API_URL ? { apiUrl: process.env.DAYTONA_API_URL } : {}),
        target: process.env.DAYTONA_TARGET === "eu" ? "eu" : "us",
      }),
  );
});
