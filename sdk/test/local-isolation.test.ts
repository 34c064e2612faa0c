/**
 * The local provider against a hostile sandbox: the sandbox's own code plants symlinks (and
 * swaps them) to make the file API escape; host secrets must not reach the sandbox's
 * environment; with bubblewrap, the rest of the host is not even visible.
 */
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalProvider, type SandboxInstance } from "@sandpit/sdk";
import { expectSandboxError } from "../../test/contract/suite.ts";
import { bwrapAvailable } from "../src/providers/local/bwrap.ts";

const SECRET = "host-secret-value-7f3a";

for (const isolation of ["none", "bwrap"] as const) {
  const available = isolation === "none" || (await bwrapAvailable());
  if (!available && process.env.CI) throw new Error("bubblewrap must be installed in CI");

  describe.skipIf(!available)(
    `local provider (isolation: ${isolation}) against a hostile sandbox${available ? "" : " (skipped: bubblewrap is not available)"}`,
    () => {
      let baseDir: string;
      let outside: string;
      let provider: LocalProvider;
      let sbx: SandboxInstance;

      beforeAll(async () => {
        baseDir = await mkdtemp(join(tmpdir(), "sandpit-hostile-"));
        outside = await mkdtemp(join(tmpdir(), "sandpit-outside-"));
        await writeFile(join(outside, "secret.txt"), SECRET);
        process.env.SANDPIT_TEST_API_KEY = SECRET;
        process.env.AWS_SECRET_ACCESS_KEY = SECRET;
        process.env.HTTPS_PROXY = `http://user:${SECRET}@127.0.0.1:9`;
        provider = new LocalProvider({ baseDir, isolation });
        sbx = await provider.create({ language: "python", threadId: "hostile" });
        delete process.env.SANDPIT_TEST_API_KEY;
        delete process.env.AWS_SECRET_ACCESS_KEY;
        delete process.env.HTTPS_PROXY;
        // The sandbox itself plants links to the outside (paths as the host sees them).
        const r = await sbx.commands.run(
          [
            `ln -s ${outside}/secret.txt file-link`,
            `ln -s ${outside} dir-link`,
            `ln -s ${outside}/planted.txt dangling-link`,
            "ln -s /etc/passwd passwd-link",
            "ln -s / root-link",
          ].join(" && "),
        );
        expect(r.exitCode).toBe(0);
      });
      afterAll(async () => {
        await sbx?.kill();
        await provider?.close();
        await rm(baseDir, { recursive: true, force: true });
        await rm(outside, { recursive: true, force: true });
      });

      it("scrubs host secrets from the sandbox environment", async () => {
        const env = (await sbx.commands.run("env")).stdout;
        expect(env).not.toContain(SECRET);
        expect(env).not.toContain("AWS_SECRET_ACCESS_KEY");
        expect(env).toContain("PATH=");
      });

      // Links into the host's outside directory: refused without bubblewrap; with it, that
      // directory does not exist in the sandbox's mount namespace at all, so they dangle.
      const hidden = isolation === "bwrap" ? "NOT_FOUND" : "INVALID_ARGUMENT";
      it.each([
        ["read a file link", hidden, (s: SandboxInstance) => s.filesystem.read("file-link")],
        [
          "read through a directory link",
          hidden,
          (s: SandboxInstance) => s.filesystem.read("dir-link/secret.txt"),
        ],
        [
          "read /etc/passwd through a link",
          "INVALID_ARGUMENT",
          (s: SandboxInstance) => s.filesystem.read("passwd-link"),
        ],
        [
          "read through a link to /",
          "INVALID_ARGUMENT",
          (s: SandboxInstance) => s.filesystem.read("root-link/etc/passwd"),
        ],
        [
          "list through a link to /",
          "INVALID_ARGUMENT",
          (s: SandboxInstance) => s.filesystem.list("root-link"),
        ],
        [
          "list through a directory link",
          hidden,
          (s: SandboxInstance) => s.filesystem.list("dir-link"),
        ],
        [
          "write through a directory link",
          hidden,
          (s: SandboxInstance) => s.filesystem.write("dir-link/planted.txt", "x"),
        ],
        [
          "write through a link to /",
          "INVALID_ARGUMENT",
          (s: SandboxInstance) => s.filesystem.write("root-link/tmp/planted.txt", "x"),
        ],
        [
          "mkdir through a directory link",
          hidden,
          (s: SandboxInstance) => s.filesystem.mkdir("dir-link/newdir"),
        ],
        [
          "remove through a directory link",
          hidden,
          (s: SandboxInstance) => s.filesystem.remove("dir-link/secret.txt"),
        ],
        [
          "a command cwd through a link",
          hidden,
          (s: SandboxInstance) => s.commands.run("ls", { cwd: "dir-link" }),
        ],
      ] as const)("%s is refused (%s)", async (_name, expected, op) => {
        await expectSandboxError(op(sbx), expected);
        expect((await readdir(outside)).sort()).toEqual(["secret.txt"]);
      });

      it("exists through a directory link does not answer true", async () => {
        const answer = sbx.filesystem.exists("dir-link/secret.txt");
        if (isolation === "bwrap") expect(await answer).toBe(false);
        else await expectSandboxError(answer, "INVALID_ARGUMENT");
      });

      it("a write to a dangling link stays inside", async () => {
        await sbx.filesystem.write("dangling-link", "inside");
        expect((await readdir(outside)).sort()).toEqual(["secret.txt"]);
        expect(await sbx.filesystem.read("dangling-link")).toBe("inside");
      });

      it("a link swapped by the sandbox between check and use never yields the outside file", async () => {
        await sbx.filesystem.write("swap-file", "harmless");
        // The sandbox swaps "swap" between a file and a link to the secret, for a bounded time.
        const swapping = sbx.commands.run(
          `ln -s ${outside}/secret.txt swap-link; end=$(($(date +%s)+6)); while [ $(date +%s) -lt $end ]; do mv -T swap-file swap 2>/dev/null; mv -T swap swap-file; mv -T swap-link swap 2>/dev/null; mv -T swap swap-link; done`,
          { timeoutMs: 20_000 },
        );
        const seen = new Set<string>();
        const deadline = Date.now() + 5_000;
        for (let i = 0; i < 400 && Date.now() < deadline; i++) {
          try {
            const text = await sbx.filesystem.read("swap");
            expect(text).not.toContain(SECRET);
            seen.add(text);
          } catch (err) {
            seen.add((err as { code: string }).code);
          }
        }
        await swapping;
        expect(
          [...seen].every((s) => ["harmless", "INVALID_ARGUMENT", "NOT_FOUND"].includes(s)),
        ).toBe(true);
        expect(seen.has("harmless")).toBe(true);
      }, 30_000);

      if (isolation !== "bwrap") return;

      it("hides the host: home, other sandboxes and most of /etc are absent", async () => {
        const r = await sbx.commands.run(
          `ls ${baseDir} 2>&1; cat ${outside}/secret.txt 2>&1; ls /etc | wc -l; test -e /etc/shadow && echo has-shadow; id -u`,
        );
        expect(r.stdout).not.toContain(SECRET);
        expect(r.stdout).toContain("No such file or directory");
        expect(r.stdout).not.toContain("has-shadow");
        expect(Number(r.stdout.trim().split("\n").at(-2))).toBeLessThan(40);
      });

      it("kills everything the sandbox started when it is paused", async () => {
        const s = await provider.create({ language: "python", threadId: "bg" });
        await s.commands.run("(sleep 1000 &) ; echo started");
        await s.pause();
        const resumed = await provider.resume(s.sandboxId);
        expect(
          (await resumed.commands.run("ps -e -o comm= | grep -c '^sleep$' || true")).stdout.trim(),
        ).toBe("0");
        await resumed.kill();
      });
    },
  );
}
