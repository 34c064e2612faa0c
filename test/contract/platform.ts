/**
 * The platform part of the contract: labels, list and get (without side effects), getInfo,
 * setTimeout, lifetimes, getUrl, release, and the create options a backend may lack, which are
 * asserted to be refused with NOT_SUPPORTED. What each target can do is its `platform` entry
 * (the target's test file says why for each gap).
 */
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SandboxCreateOptions, SandboxInstance } from "@sandpit/sdk";
import { expectSandboxError, freeHostPort, type ContractTarget } from "./suite.ts";

/** What a target's backend honours of create's platform options, and what it enforces fast. */
export interface PlatformCapabilities {
  /** The provider's name in SandboxInfo. */
  provider: string;
  ttl: boolean;
  idleTimeout: boolean;
  cpu: boolean;
  memory: boolean;
  disk: boolean;
  template: boolean;
  networkDeny: boolean;
  networkInternet: boolean;
  networkAllow: boolean;
  mounts: boolean;
  /** The backend reports when the sandbox ends (expiresAt). */
  expiresAt: boolean;
  /** Seconds-scale lifetimes are enforced (the sandbox is gone soon after ttlMs). */
  ttlEnforced: boolean;
  /** A memory limit can be seen killing a process that exceeds it. */
  memoryEnforced: boolean;
  /** network "deny" leaves the sandbox with loopback only, and mounts are visible inside. */
  isolationVisible: boolean;
}

const MINUTE = 60_000;

/** One sample of each platform option, and the capability that makes it supported. */
function samples(hostDir: string) {
  return [
    ["ttl", { lifetime: { ttlMs: 10 * MINUTE } }],
    ["idleTimeout", { lifetime: { idleTimeoutMs: 5 * MINUTE } }],
    ["cpu", { resources: { cpu: 0.5 } }],
    ["memory", { resources: { memoryMiB: 512 } }],
    ["disk", { resources: { diskMiB: 1024 } }],
    ["template", { template: "some-template" }],
    ["networkDeny", { network: "deny" }],
    ["networkInternet", { network: "internet" }],
    ["networkAllow", { network: { allow: ["203.0.113.0/24"] } }],
    ["mounts", { mounts: [{ source: hostDir, target: "/mnt/shared" }] }],
  ] as const;
}

export function platformContract(
  main: () => SandboxInstance,
  target: () => ContractTarget,
  caps: PlatformCapabilities,
): void {
  describe("platform: labels, list, get, lifetime, URLs", () => {
    const suite = `s${randomUUID().slice(0, 8)}`;
    let labeled: SandboxInstance;
    let hostDir: string;
    const provider = () => target().provider;

    beforeAll(async () => {
      hostDir = await mkdtemp(join(tmpdir(), "sandpit-mount-"));
      await writeFile(join(hostDir, "hello.txt"), "from the host");
      await chmod(hostDir, 0o755); // readable by a container's user too
      labeled = await provider().create({
        language: "python",
        threadId: `t${randomUUID().slice(0, 8)}`,
        labels: { suite, role: "labeled" },
        ...(caps.ttl ? { lifetime: { ttlMs: 20 * MINUTE } } : {}),
      });
    });
    afterAll(async () => {
      await labeled?.kill().catch(() => undefined);
      await rm(hostDir, { recursive: true, force: true }).catch(() => undefined);
    });

    it("list({labels}) finds sandboxes by their labels, and only those", async () => {
      const found = await provider().list({ labels: { suite } });
      expect(found.map((s) => s.sandboxId)).toEqual([labeled.sandboxId]);
      expect(found[0]!.labels).toEqual({ suite, role: "labeled" });
      expect(await provider().list({ labels: { suite, role: "other" } })).toEqual([]);
      const all = await provider().list();
      expect(all.map((s) => s.sandboxId)).toContain(labeled.sandboxId);
      expect(all.map((s) => s.sandboxId)).toContain(main().sandboxId);
    });

    it("get(id) and getInfo() describe the sandbox", async () => {
      const info = await provider().get(labeled.sandboxId);
      expect(info).toMatchObject({
        sandboxId: labeled.sandboxId,
        provider: caps.provider,
        state: "running",
        labels: { suite, role: "labeled" },
      });
      if (caps.expiresAt && caps.ttl) {
        const left = info.expiresAt!.getTime() - Date.now();
        expect(left).toBeGreaterThan(15 * MINUTE);
        expect(left).toBeLessThanOrEqual(21 * MINUTE);
      }
      const again = await labeled.getInfo();
      expect(again.sandboxId).toBe(info.sandboxId);
      expect(again.labels).toEqual(info.labels);
    });

    it("get of an unknown sandbox is NOT_FOUND", async () => {
      await expectSandboxError(provider().get("no-such-sandbox-0"), "NOT_FOUND");
    });

    it("setTimeout moves the sandbox's end; a bad value is INVALID_ARGUMENT", async () => {
      await labeled.setTimeout(30 * MINUTE);
      if (caps.expiresAt) {
        const left = (await labeled.getInfo()).expiresAt!.getTime() - Date.now();
        expect(left).toBeGreaterThan(28 * MINUTE);
        expect(left).toBeLessThanOrEqual(32 * MINUTE);
      }
      await expectSandboxError(labeled.setTimeout(-1), "INVALID_ARGUMENT");
      await expectSandboxError(labeled.setTimeout(Number.NaN), "INVALID_ARGUMENT");
    });

    it("getUrl(port) is a full URL that reaches a server inside, with the headers it needs", async () => {
      const port = await freeHostPort();
      await labeled.filesystem.write("www/index.html", "served for getUrl");
      await labeled.commands.run(
        `cd www && (python3 -m http.server ${port} --bind 127.0.0.1 > /dev/null 2>&1 &)`,
      );
      const { url, headers } = await labeled.getUrl(port);
      expect(url).toMatch(/^https?:\/\//);
      let body = "";
      for (let i = 0; i < 150 && !body; i++) {
        body = await fetch(new URL("index.html", url.endsWith("/") ? url : `${url}/`), {
          headers,
        }).then(
          (r) => (r.ok ? r.text() : ""),
          () => "",
        );
        if (!body) await new Promise((r) => setTimeout(r, 100));
      }
      expect(body).toBe("served for getUrl");
      await expectSandboxError(labeled.getUrl(0), "INVALID_ARGUMENT");
    });

    it("release lets go without stopping: the sandbox still runs", async () => {
      await provider().release(labeled.sandboxId);
      expect((await provider().get(labeled.sandboxId)).state).toBe("running");
      const back = await provider().resume(labeled.sandboxId);
      expect((await back.commands.run("echo still")).stdout).toBe("still\n");
    });

    it("a paused sandbox stays paused after get and list", async () => {
      await labeled.pause();
      expect((await provider().get(labeled.sandboxId)).state).toBe("paused");
      const listed = await provider().list({ labels: { suite } });
      expect(listed.map((s) => s.state)).toEqual(["paused"]);
      expect((await provider().get(labeled.sandboxId)).state).toBe("paused");
      const back = await provider().resume(labeled.sandboxId);
      expect((await back.commands.run("echo back")).stdout).toBe("back\n");
      expect((await provider().get(labeled.sandboxId)).state).toBe("running");
    });

    it("refuses every platform option the backend cannot honour with NOT_SUPPORTED", async () => {
      let refused = 0;
      const before = (await provider().list()).length;
      for (const [cap, option] of samples(hostDir)) {
        if (caps[cap]) continue;
        const err = await expectSandboxError(
          provider().create({ language: "python", ...(option as Partial<SandboxCreateOptions>) }),
          "NOT_SUPPORTED",
        );
        expect(err.message).toContain(caps.provider);
        refused++;
      }
      // Nothing of a refused create is left behind.
      expect((await provider().list()).length).toBe(before);
      const lacking = samples(hostDir).filter(([c]) => !caps[c]);
      expect(refused).toBe(lacking.length);
    });

    it("bad platform options are INVALID_ARGUMENT, before anything is created", async () => {
      const bad: Partial<SandboxCreateOptions>[] = [
        { labels: { "sandpit.dev/user": "x" } },
        { labels: { ok: "no spaces allowed" } },
        { lifetime: { ttlMs: 60_000, idleTimeoutMs: 120_000 } },
        { lifetime: { ttlMs: 0 } },
        { resources: { cpu: -1 } },
        { network: "bogus" as "deny" },
        { mounts: [{ source: "/tmp", target: "relative" }] },
        { mounts: [{ source: "/tmp", target: "/mnt/user-data/x" }] },
      ];
      for (const o of bad)
        await expectSandboxError(
          provider().create({ language: "python", ...o }),
          "INVALID_ARGUMENT",
        );
      await expectSandboxError(
        provider().list({ labels: { "bad key!": "x" } }),
        "INVALID_ARGUMENT",
      );
    });

    it.runIf(caps.ttlEnforced)("a sandbox past its lifetime is gone", async () => {
      const short = await provider().create({
        language: "python",
        threadId: `t${randomUUID().slice(0, 8)}`,
        lifetime: { ttlMs: 2_000 },
      });
      let code = "";
      for (let i = 0; i < 100 && code !== "NOT_FOUND"; i++) {
        await new Promise((r) => setTimeout(r, 200));
        code = await provider()
          .get(short.sandboxId)
          .then(
            () => "",
            (e: { code?: string }) => e.code ?? "",
          );
      }
      expect(code).toBe("NOT_FOUND");
      await expectSandboxError(provider().resume(short.sandboxId), "NOT_FOUND");
    });

    it.runIf(caps.memoryEnforced)("a memory limit stops a process that exceeds it", async () => {
      const small = await provider().create({
        language: "python",
        threadId: `t${randomUUID().slice(0, 8)}`,
        resources: { memoryMiB: 128 },
      });
      try {
        expect((await small.getInfo()).resources?.memoryMiB).toBe(128);
        const r = await small.commands.run(
          "python3 -c \"b = bytearray(400 * 1024 * 1024); print('allocated')\"",
        );
        expect(r.exitCode).not.toBe(0);
        expect(r.stdout).not.toContain("allocated");
      } finally {
        await small.kill();
      }
    });

    it.runIf(caps.isolationVisible)(
      'network "deny" leaves loopback only; mounts show host files, read-only when asked',
      async () => {
        const sbx = await provider().create({
          language: "python",
          threadId: `t${randomUUID().slice(0, 8)}`,
          network: "deny",
          mounts: [
            { source: hostDir, target: "/mnt/shared" },
            { source: hostDir, target: "/mnt/shared-ro", readOnly: true },
          ],
        });
        try {
          const ifaces = await sbx.commands.run(
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
          );
          expect(ifaces.stdout.trim().split("\n")).toEqual(["lo"]);
          expect((await sbx.commands.run("cat /mnt/shared/hello.txt")).stdout).toBe(
            "from the host",
          );
          const ro = await sbx.commands.run("echo x > /mnt/shared-ro/new.txt");
          expect(ro.exitCode).not.toBe(0);
        } finally {
          await sbx.kill();
        }
      },
    );
  });
}
