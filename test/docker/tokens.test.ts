/**
 * Attack: code in a Docker sandbox looks for its sandboxd's token in every environment it can
 * read (its own, PID 1's, every process's /proc/<pid>/environ, `env`), and tries tokens of one
 * sandbox on another. The container is given only the token's SHA-256; the token is derived on
 * the host from a key in the provider's state directory, which nothing mounts.
 */
import { createHmac } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { sandboxdConnection, type SandboxInstance } from "@sandpit/sdk";
import { DockerProvider } from "@sandpit/sdk/docker";
import { docker, removeAll } from "./helpers.ts";
import { READ_EVERY_ENVIRONMENT } from "../security/read-environments.ts";

const image = inject("sandboxImage");
const PREFIX = "sandpit-tk";

/** The status sandboxd answers an authenticated request with, for `token`. */
async function statusWith(s: SandboxInstance, token: string): Promise<number> {
  const { baseUrl } = await sandboxdConnection(s);
  const res = await fetch(`${baseUrl}/v1/files/stat?path=.`, {
    headers: { authorization: `Bearer ${token}` },
  });
  await res.body?.cancel();
  return res.status;
}

let stateDir: string;
let p: DockerProvider;
beforeAll(async () => {
  await removeAll(PREFIX);
  stateDir = await mkdtemp(join(tmpdir(), "sandpit-tokens-"));
  p = new DockerProvider({
    image,
    containerPrefix: PREFIX,
    basePort: 33500,
    idleTimeoutMs: 0,
    memoryMb: 512,
    stateDir,
  });
});
afterAll(async () => {
  await p?.close();
  await removeAll(PREFIX);
  await rm(stateDir, { recursive: true, force: true });
});

describe("a Docker sandbox's token", () => {
  it("is nowhere its own code can read, and one sandbox's token is refused by another", async () => {
    const [a, b] = await Promise.all([
      p.create({ language: "python", threadId: "reader" }),
      p.create({ language: "python", threadId: "neighbour" }),
    ]);
    const tokenA = (await sandboxdConnection(a)).token;
    const tokenB = (await sandboxdConnection(b)).token;
    expect(tokenA).not.toBe(tokenB);

    const r = await a.executeCode(READ_EVERY_ENVIRONMENT, "python");
    expect(r.success, r.error?.message).toBe(true);
    // The reads worked: PID 1's environment (tini's, sandboxd's parent) was read, digest and all.
    expect(r.stdout).toMatch(/SANDBOXD_TOKEN_SHA256=[0-9a-f]{64}/);
    expect(r.stdout).toContain("SANDBOXD_ENV=");
    expect(r.stdout).not.toContain(tokenA);
    expect(r.stdout).not.toContain(tokenB);
    expect(r.stdout).not.toMatch(/SANDBOXD_TOKEN=/);
    // Nor does the engine hold it: the container's configuration has the digest only.
    const env = await docker("inspect", "-f", "{{json .Config.Env}}", a.sandboxId);
    expect(env).not.toContain(tokenA);

    expect(await statusWith(a, tokenA)).toBe(200);
    expect(await statusWith(a, tokenB)).toBe(401);
    expect(await statusWith(b, tokenA)).toBe(401);
    // The key the tokens come from is the provider's state directory's, readable by its user only.
    expect((await stat(join(stateDir, "token.key"))).mode & 0o777).toBe(0o600);
    await Promise.all([a.kill(), b.kill()]);
  }, 120_000);

  it("of a warm container opens that container only, and no longer once a thread claims it", async () => {
    const warmProvider = new DockerProvider({
      image,
      containerPrefix: PREFIX,
      basePort: 33500,
      idleTimeoutMs: 0,
      memoryMb: 512,
      stateDir,
      warm: 1,
    });
    try {
      const other = await warmProvider.create({ language: "python", threadId: "other" });
      await warmProvider.fillWarmPool();
      const [warm] = (
        await docker("ps", "--filter", `name=^${PREFIX}-warm-`, "--format", "{{.Names}}")
      ).split("\n");
      expect(warm).toBeTruthy();
      // The warm container's token, as the provider derives it (key, the container's token id
      // and the name it was created under).
      const key = (await readFile(join(stateDir, "token.key"), "utf8")).trim();
      const id = await docker(
        "inspect",
        "-f",
        '{{index .Config.Labels "sandpit.dev/token-id"}}',
        warm!,
      );
      const warmToken = createHmac("sha256", Buffer.from(key, "hex"))
        .update(`docker-sandbox-token\0${id}\0${warm}`)
        .digest("hex");
      const port = await docker(
        "inspect",
        "-f",
        '{{index .Config.Labels "sandpit.dev/port"}}',
        warm!,
      );
      const warmStatus = async (token: string) => {
        const res = await fetch(`http://127.0.0.1:${port}/v1/files/stat?path=.`, {
          headers: { authorization: `Bearer ${token}` },
        });
        await res.body?.cancel();
        return res.status;
      };
      expect(await warmStatus(warmToken)).toBe(200);
      expect(await statusWith(other, warmToken)).toBe(401);

      const s = await warmProvider.create({ language: "python", threadId: "claims-warm" });
      // The warm container itself, renamed to the thread's name.
      expect(await docker("inspect", "-f", "{{.Name}}", s.sandboxId)).toBe(`/${s.sandboxId}`);
      expect(await docker("ps", "-a", "--filter", `name=^${warm}$`, "--format", "{{.Names}}")).toBe(
        "",
      );
      const claimed = (await sandboxdConnection(s)).token;
      expect(claimed).not.toBe(warmToken);
      expect(await warmStatus(warmToken)).toBe(401);
      expect(await warmStatus(claimed)).toBe(200);
      const r = await s.executeCode(READ_EVERY_ENVIRONMENT, "python");
      expect(r.stdout).toMatch(/SANDBOXD_TOKEN_SHA256=/);
      expect(r.stdout).not.toContain(claimed);
      expect(r.stdout).not.toContain(warmToken);

      // Stopped and started again, its sandboxd starts with the warm token's digest: the
      // provider hands it the claimed token again, and the warm token stays refused.
      await s.pause();
      expect((await s.commands.run("echo back")).stdout).toBe("back\n");
      expect(await warmStatus(warmToken)).toBe(401);
      expect(await warmStatus(claimed)).toBe(200);
      // A later process (its own provider object) derives the same token.
      const later = new DockerProvider({
        image,
        containerPrefix: PREFIX,
        basePort: 33500,
        idleTimeoutMs: 0,
        stateDir,
      });
      const again = await later.resume(s.sandboxId);
      expect((await again.commands.run("echo later")).stdout).toBe("later\n");
      await later.close();
      await Promise.all([s.kill(), other.kill()]);
    } finally {
      await warmProvider.close();
    }
  }, 180_000);
});
