/**
 * serve's first sandbox (provisioner/src/serve/first-sandbox.ts), as a user meets it: serve
 * started with no keys given prints its URL and generated key, then a sandbox's id after a line
 * of Python and one of TypeScript ran in it; the curl it prints works; the sandbox is a normal
 * one of the key's tenant (listed, with the TTL it was given), a restart finds it instead of
 * making another, and deleting it through the API leaves nothing on the backend. Registered by
 * test/serve/first-sandbox-local.test.ts and test/serve/docker-first-sandbox.test.ts.
 */
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { type ServeProcess, call, removeState, startServe } from "./harness.ts";

export function firstSandboxSuite(
  backend: string,
  args: () => string[],
  leftovers: (stateDir: string, stateId: string) => Promise<string[]>,
  env: () => Record<string, string> = () => ({}),
): void {
  let stateDir: string | undefined;
  let serve: ServeProcess | undefined;

  afterAll(async () => {
    await serve?.stop();
    if (stateDir) await removeState(stateDir);
  });

  test(`sandpit serve (${backend}) runs a first sandbox and says how to reach it`, async () => {
    stateDir = await mkdtemp(join(tmpdir(), `sandpit-serve-first-${backend}-`));
    // No SANDPIT_API_KEYS: serve generates the key and prints it, as on a first start.
    const noKeys = { ...env(), SANDPIT_API_KEYS: "", SANDPIT_API_KEYS_FILE: "" };
    const start = () =>
      startServe(["--state-dir", stateDir!, ...args()], noKeys, { firstSandbox: true });
    serve = await start();
    const key = serve.generatedKey!;
    expect(key).toMatch(/^sp_/);
    const id = await serve.line("SANDPIT_SANDBOX_ID", 150_000, /did not run/);
    const out = serve.stderr();
    expect(out).toMatch(/python: {5}Hello from Python 3\.\d+/);
    expect(out).toMatch(/typescript: Hello from TypeScript on Node v\d+/);
    expect(out).toContain(`first sandbox: ${id}, deleted at `);
    // The curl it prints, run as printed (the key from SANDPIT_API_KEY).
    const execute = /-d '(\{.*\})' (http\S+)/.exec(out)!;
    expect(execute[2]).toBe(`${serve.url}/v1/sandboxes/${id}/proxy/v1/code/execute`);
    expect(out).toContain('-H "Authorization: Bearer $SANDPIT_API_KEY"');
    const ran = await call(
      serve.url,
      "POST",
      new URL(execute[2]!).pathname,
      { bearer: key },
      JSON.parse(execute[1]!),
    );
    expect(ran.json).toMatchObject({ success: true, stdout: "42\n" });

    const listed = await call(serve.url, "GET", "/v1/sandboxes", { bearer: key });
    expect(listed.json.sandboxes).toHaveLength(1);
    const first = listed.json.sandboxes[0];
    expect(first).toMatchObject({ id, threadId: "first-sandbox", phase: "Ready" });
    const ttlS = (Date.parse(first.expiresAt) - Date.parse(first.createdAt)) / 1000;
    expect(ttlS).toBe(3600);

    // A restart finds it again: still one sandbox, the same id.
    await serve.stop();
    serve = await start();
    expect(await serve.line("SANDPIT_SANDBOX_ID", 150_000, /did not run/)).toBe(id);
    expect(serve.stderr()).toContain(`first sandbox: ${id} (made by an earlier start)`);
    expect(
      (await call(serve.url, "GET", "/v1/sandboxes", { bearer: key })).json.sandboxes,
    ).toHaveLength(1);

    expect((await call(serve.url, "DELETE", `/v1/sandboxes/${id}`, { bearer: key })).status).toBe(
      204,
    );
    const stateId = (
      JSON.parse(await readFile(join(stateDir, "serve.json"), "utf8")) as { id: string }
    ).id;
    expect(await leftovers(stateDir, stateId)).toEqual([]);
  }, 400_000);
}
