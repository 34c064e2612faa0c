/**
 * `SandboxdClient.init` hands sandboxd a new token (a warm claim). The old token opens nothing
 * after it, so the client carries on with the new one, on the connection it already has: the
 * claimer's first command needs no new connection (the Docker provider's warm claim relies on
 * it). A refused init leaves the client's token as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxdClient } from "../src/sandboxd-client.ts";
import { SandboxError } from "../src/errors.ts";
import { startSandboxd, type TestSandboxd } from "../../sandboxd/test/helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
});
afterAll(() => d.stop());

describe("SandboxdClient.init", () => {
  it("carries on with the token it set, and the old one opens nothing", async () => {
    const client = new SandboxdClient({ baseUrl: d.url, token: d.token });
    const old = new SandboxdClient({ baseUrl: d.url, token: d.token });
    try {
      expect((await client.runCommand({ command: "true" })).exitCode).toBe(0);
      const next = "c".repeat(64);
      await client.init({ token: next, env: { CLAIMED: "yes" } });
      expect(client.connection.token).toBe(next);
      expect((await client.runCommand({ command: "echo $CLAIMED" })).stdout).toBe("yes\n");
      const refused = await old.runCommand({ command: "true" }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(SandboxError);
      expect((refused as SandboxError).code).toBe("UNAUTHORIZED");
      // Refused (its token is the old one): nothing changes, on either side.
      await expect(old.init({ token: "d".repeat(64) })).rejects.toMatchObject({
        code: "UNAUTHORIZED",
      });
      expect(old.connection.token).toBe(d.token);
      expect((await client.runCommand({ command: "true" })).exitCode).toBe(0);
    } finally {
      await Promise.all([client.destroy(), old.destroy()]);
    }
  });
});
