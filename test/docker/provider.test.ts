/**
 * The Docker provider on a real Docker engine and the real sandbox image (both prepared by
 * test/docker/global-setup.ts): discovery across processes, port-conflict retry, warm pool,
 * idle reaper, confinement, and faults.
 */
import { execFile, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:net";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createProvider, type SandboxInstance } from "@sandpit/sdk";
import { DockerProvider } from "@sandpit/sdk/docker";
import { detectRuntime } from "../../sdk/src/providers/docker/detect.ts";
import { DockerRuntime } from "../../sdk/src/providers/docker/docker-runtime.ts";
import { expectSandboxError } from "../contract/suite.ts";

const run = promisify(execFile);
const image = inject("sandboxImage");
const PREFIX = "sandpit-pt";
const docker = (...args: string[]) => run("docker", args).then((r) => r.stdout.trim());

async function removeAll(prefix: string): Promise<void> {
  const names = (await docker("ps", "-a", "--filter", `name=^${prefix}-`, "--format", "{{.Names}}"))
    .split("\n")
    .filter(Boolean);
  if (names.length) await docker("rm", "-f", "-v", ...names);
  const volumes = (
    await docker("volume", "ls", "--filter", `name=^${prefix}-`, "--format", "{{.Name}}")
  )
    .split("\n")
    .filter(Boolean);
  if (volumes.length) await docker("volume", "rm", "-f", ...volumes);
}

/** What tells one running container from another, or from itself restarted. */
async function identity(container: string): Promise<{ id: string; startedAt: string }> {
  const [id, startedAt] = (
    await docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", container)
  ).split(" ");
  return { id: id!, startedAt: startedAt! };
}

function provider(
  extra: Partial<ConstructorParameters<typeof DockerProvider>[0]> = {},
  prefix = PREFIX,
): DockerProvider {
  return new DockerProvider({
    image,
    containerPrefix: prefix,
    basePort: 32000,
    idleTimeoutMs: 0,
    memoryMb: 512,
    ...extra,
  });
}

beforeAll(async () => {
  await removeAll(PREFIX);
});
afterAll(async () => {
  await removeAll(PREFIX);
});

describe("discovery across processes", () => {
  it("two processes racing for one thread end up in one container", async () => {
    const script = `
      import { DockerProvider } from "@sandpit/sdk/docker";
      const p = new DockerProvider({ image: ${JSON.stringify(image)}, containerPrefix: "${PREFIX}", basePort: 32000, idleTimeoutMs: 0 });
      const s = await p.create({ language: "python", threadId: "race" });
      const r = await s.commands.run("hostname");
      console.log(JSON.stringify({ id: s.sandboxId, host: r.stdout.trim() }));
      await p.close();
    `;
    const runOne = () =>
      new Promise<{ id: string; host: string }>((resolve, reject) => {
        const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
          cwd: process.cwd(),
          stdio: ["ignore", "pipe", "inherit"],
        });
        let out = "";
        child.stdout.on("data", (c: Buffer) => (out += c.toString()));
        child.once("exit", (code) =>
          code === 0
            ? resolve(JSON.parse(out.trim().split("\n").at(-1)!))
            : reject(new Error(`exit ${code}`)),
        );
      });
    const [a, b] = await Promise.all([runOne(), runOne()]);
    expect(a.id).toBe(b.id);
    expect(a.host).toBe(b.host);
    const containers = (
      await docker("ps", "-a", "--filter", `name=^${a.id}$`, "--format", "{{.Names}}")
    )
      .split("\n")
      .filter(Boolean);
    expect(containers).toEqual([a.id]);
  }, 120_000);

  it("a second provider (another process's view) adopts the running container and its files", async () => {
    const first = provider();
    const s = await first.create({ language: "python", threadId: "adopt" });
    await s.filesystem.write("note.txt", "left by the first process");
    await first.close();
    const second = provider();
    const again = await second.create({ language: "python", threadId: "adopt" });
    expect(again.sandboxId).toBe(s.sandboxId);
    expect(await again.filesystem.read("note.txt")).toBe("left by the first process");
    await again.kill();
    await second.close();
  }, 120_000);
});

describe("sandboxd records: a known sandbox without the engine", () => {
  it("a later process reaches the sandbox through its 0600 record alone; a stale record falls back and is written again; kill removes it", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-records-"));
    // A provider whose engine socket does not exist: anything it does through the engine fails.
    const noEngine = () =>
      provider({ stateDir, socketPath: join(stateDir, "no-engine.sock"), runtime: "docker" });
    try {
      const first = provider({ stateDir });
      const s = await first.create({
        language: "python",
        threadId: "records",
        workingDirectory: "/mnt/user-data/work",
      });
      await first.close();
      const file = join(stateDir, `${s.sandboxId}.sandboxd.json`);
      expect((await stat(file)).mode & 0o777).toBe(0o600);

      // Known: resume and run with no engine at all, the stored defaults included.
      const blind = noEngine();
      const known = await blind.resume(s.sandboxId);
      expect((await known.commands.run("pwd")).stdout).toBe("/mnt/user-data/work\n");
      await blind.close();

      // Stale (stopped from outside): no engine, no sandbox; with the engine, it starts again.
      await docker("stop", "-t", "1", s.sandboxId);
      await expectSandboxError(noEngine().resume(s.sandboxId), "CONNECTION_FAILED");
      const second = provider({ stateDir });
      const back = await second.resume(s.sandboxId);
      expect((await back.commands.run("echo back")).stdout).toBe("back\n");
      await second.close();

      // Stale (a token that is not this sandbox's): refused, so the engine path writes it again.
      const good = await readFile(file, "utf8");
      await writeFile(file, JSON.stringify({ ...JSON.parse(good), token: "0".repeat(64) }));
      await expectSandboxError(noEngine().resume(s.sandboxId), "CONNECTION_FAILED");
      const third = provider({ stateDir });
      expect((await (await third.resume(s.sandboxId)).commands.run("true")).exitCode).toBe(0);
      expect(JSON.parse(await readFile(file, "utf8"))).toEqual(JSON.parse(good));
      await third.close();
      const fourth = noEngine();
      expect((await (await fourth.resume(s.sandboxId)).commands.run("true")).exitCode).toBe(0);
      await fourth.close();

      // Killed: the record goes with the container.
      await (await provider({ stateDir }).resume(s.sandboxId)).kill();
      await expect(stat(file)).rejects.toMatchObject({ code: "ENOENT" });
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 180_000);
});

describe("host ports", () => {
  it("retries on ports taken by other programs", async () => {
    const base = 32500;
    const servers: Server[] = [];
    for (let i = 0; i < 5; i++) {
      const server = createServer();
      await new Promise<void>((r) => server.listen(base + i, "127.0.0.1", () => r()));
      servers.push(server);
    }
    const lines: string[] = [];
    const logger = pino(
      { level: "info" },
      new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }),
    );
    const p = new DockerProvider(
      { image, containerPrefix: PREFIX, basePort: base, idleTimeoutMs: 0 },
      logger,
    );
    try {
      const s = await p.create({ language: "python", threadId: "ports" });
      expect((await s.commands.run("echo ok")).stdout).toBe("ok\n");
      const port = Number((await docker("port", s.sandboxId, "8080/tcp")).split(":").at(-1));
      expect(port).toBeGreaterThanOrEqual(base + 5);
      expect(lines.filter((l) => l.includes("host port taken")).length).toBe(5);
      await s.kill();
    } finally {
      await p.close();
      for (const s of servers) s.close();
    }
  }, 120_000);
});

describe("concurrency", () => {
  it("twelve concurrent creates on one provider all succeed, on distinct ports", async () => {
    const p = provider({}, `${PREFIX}-c`);
    try {
      const sandboxes = await Promise.all(
        Array.from({ length: 12 }, (_, i) => p.create({ language: "python", threadId: `c${i}` })),
      );
      const outs = await Promise.all(sandboxes.map((s) => s.commands.run("echo up")));
      expect(outs.every((o) => o.stdout === "up\n")).toBe(true);
      const ports = await Promise.all(
        sandboxes.map((s) => docker("port", s.sandboxId, "8080/tcp")),
      );
      expect(new Set(ports).size).toBe(12);
    } finally {
      await p.close();
      await removeAll(`${PREFIX}-c`);
    }
  }, 180_000);
});

describe("warm pool and reuse", () => {
  it("hands a released sandbox back to its thread, files and all", async () => {
    const p = provider();
    const s = await p.create({ language: "python", threadId: "reuse" });
    await s.commands.run("echo kept > /mnt/user-data/workspace/state.txt");
    // A process and a file in the container's tmpfs: both gone if the container restarted.
    await s.commands.run("(sleep 600 > /dev/null 2>&1 &) ; echo marker > /tmp/before-release");
    const before = await identity(s.sandboxId);
    await p.release(s.sandboxId);
    const again = await p.create({ language: "python", threadId: "reuse" });
    expect(await identity(again.sandboxId)).toEqual(before);
    expect((await again.commands.run("cat /tmp/before-release; pgrep -cx sleep")).stdout).toBe(
      "marker\n1\n",
    );
    expect((await again.commands.run("cat state.txt")).stdout).toBe("kept\n");
    await again.kill();
    await p.close();
  }, 120_000);

  it("gives a new thread a pre-started blank container, with its own environment", async () => {
    const p = provider({ warm: 1 }, `${PREFIX}-w`);
    try {
      await p.fillWarmPool();
      const warm = (
        await docker("ps", "--filter", `name=^${PREFIX}-w-warm-`, "--format", "{{.Names}}")
      )
        .split("\n")
        .filter(Boolean);
      expect(warm).toHaveLength(1);
      const warmIdentity = await identity(warm[0]!);
      const s = await p.create({
        language: "python",
        threadId: "claims-warm",
        envs: { CLAIMED_BY: "thread-7" },
      });
      expect(
        (await s.commands.run("echo $CLAIMED_BY; ls /mnt/user-data/workspace | wc -l")).stdout,
      ).toBe("thread-7\n0\n");
      // The warm container became the thread's, under the thread's deterministic name, without
      // a restart.
      expect(await identity(s.sandboxId)).toEqual(warmIdentity);
      expect(
        await docker("ps", "-a", "--filter", `name=^${warm[0]}$`, "--format", "{{.Names}}"),
      ).toBe("");
      await p.fillWarmPool(); // and the pool is topped up again
      expect(
        (await docker("ps", "--filter", `name=^${PREFIX}-w-warm-`, "--format", "{{.Names}}"))
          .split("\n")
          .filter(Boolean),
      ).toHaveLength(1);
      await s.kill();
    } finally {
      await p.close();
      await removeAll(`${PREFIX}-w`);
    }
  }, 180_000);

  it("a labelled create with a lifetime claims a warm container; list, get and another process see its labels", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "sandpit-claims-"));
    const p = provider({ warm: 1, stateDir }, `${PREFIX}-wl`);
    try {
      await p.fillWarmPool();
      const warm = (
        await docker("ps", "--filter", `name=^${PREFIX}-wl-warm-`, "--format", "{{.Names}}")
      )
        .split("\n")
        .filter(Boolean);
      expect(warm).toHaveLength(1);
      const warmIdentity = await identity(warm[0]!);
      const s = await p.create({
        language: "python",
        threadId: "claims-labelled",
        labels: { team: "blue" },
        lifetime: { ttlMs: 600_000 },
      });
      // The warm container, not a new one, though its labels were set when it was blank.
      expect(await identity(s.sandboxId)).toEqual(warmIdentity);
      const check = async (q: DockerProvider) => {
        const info = await q.get(s.sandboxId);
        expect(info).toMatchObject({ labels: { team: "blue" }, threadId: "claims-labelled" });
        expect(info.expiresAt!.getTime() - Date.now()).toBeGreaterThan(500_000);
        expect((await q.list({ labels: { team: "blue" } })).map((i) => i.sandboxId)).toEqual([
          s.sandboxId,
        ]);
      };
      await check(p);
      // Another process on the same state directory: the labels are the host's, not memory.
      await check(provider({ stateDir }, `${PREFIX}-wl`));
      await s.kill();
      // Nothing of it is left; the key its token came from is the state directory's.
      expect(await readdir(stateDir)).toEqual(["token.key"]);
    } finally {
      await p.close();
      await removeAll(`${PREFIX}-wl`);
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 180_000);

  it("stops idle sandboxes, keeping their data; the next call starts them again", async () => {
    const p = provider({ idleTimeoutMs: 1_000 });
    const s = await p.create({ language: "python", threadId: "idle" });
    await s.filesystem.write("survives.txt", "yes");
    const before = await identity(s.sandboxId);
    // The provider's own reaper (every idleTimeoutMs/2, at least 1 s) stops it.
    let running = "true";
    for (let i = 0; i < 50 && running === "true"; i++) {
      await new Promise((r) => setTimeout(r, 200));
      running = await docker("inspect", "-f", "{{.State.Running}}", s.sandboxId);
    }
    expect(running).toBe("false");
    expect(await s.filesystem.read("survives.txt")).toBe("yes");
    expect(await docker("inspect", "-f", "{{.State.Running}}", s.sandboxId)).toBe("true");
    // The same container, started again.
    const after = await identity(s.sandboxId);
    expect(after.id).toBe(before.id);
    expect(after.startedAt).not.toBe(before.startedAt);
    await s.kill();
    await p.close();
  }, 120_000);
});

describe("confinement", () => {
  let p: DockerProvider;
  let s: SandboxInstance;
  beforeAll(async () => {
    p = provider({ memoryMb: 256, pids: 128, cpus: 1 });
    s = await p.create({ language: "python", threadId: "confined" });
  }, 120_000);
  afterAll(async () => {
    await s?.kill();
    await p?.close();
  });

  it("runs as a non-root user with no capabilities, no new privileges and a read-only root", async () => {
    const r = await s.commands.run(
      "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; touch /usr/x 2>&1; touch /tmp/ok && echo tmp-writable",
    );
    expect(r.stdout).toMatch(/^1000\n/);
    expect(r.stdout).toContain("CapEff:\t0000000000000000");
    expect(r.stdout).toContain("NoNewPrivs:\t1");
    expect(r.stdout).toMatch(/Read-only file system/);
    expect(r.stdout).toContain("tmp-writable");
  });

  it("holds /tmp at half its memory: a write past it fails with ENOSPC, and the sandbox answers", async () => {
    // 256 MiB of memory, so a tmpfs of 128 MiB (512 MiB at most); a /tmp larger than the memory
    // limit would have the kernel kill the writer, or sandboxd, rather than refuse the write.
    const r = await s.commands.run(
      "df -B1 --output=size /tmp | tail -1; " +
        "dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1 | grep -o 'No space left on device'; " +
        "stat -c %s /tmp/fill; rm /tmp/fill",
    );
    const [size, error, written] = r.stdout.trim().split("\n");
    expect(Number(size)).toBe(128 * 1048576);
    expect(error).toBe("No space left on device");
    expect(Number(written)).toBeLessThanOrEqual(128 * 1048576);
    expect(Number(written)).toBeGreaterThan(100 * 1048576);
    expect((await s.commands.run("echo alive")).stdout).toBe("alive\n");
  });

  it("contains a fork bomb with the pids limit and stays usable", async () => {
    // The bomb forks in the background while the command spins without forking; the pids
    // limit stops it short of the machine (forks fail, and say so), and the timeout kills the
    // whole process group, bomb included.
    let stderr = "";
    await expectSandboxError(
      s.commands.run("bomb() { bomb | bomb & }; bomb; while :; do :; done", {
        timeoutMs: 4_000,
        onStderr: (d) => (stderr += d),
      }),
      "TIMEOUT",
    );
    expect(stderr).toMatch(/Cannot fork|Resource temporarily unavailable/i);
    expect((await run("sh", ["-c", "echo host-still-forks"])).stdout).toBe("host-still-forks\n");
    let alive = "";
    for (let i = 0; i < 20 && alive !== "alive\n"; i++) {
      alive = await s.commands.run("echo alive").then(
        (r) => r.stdout,
        () => "",
      );
      if (alive !== "alive\n") await new Promise((r) => setTimeout(r, 500));
    }
    expect(alive).toBe("alive\n");
  }, 60_000);

  it("kills a memory hog, says so, and keeps sandboxd alive", async () => {
    const r = await s.executeCode(
      "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 1024 * 1024))",
      "python",
      { timeoutMs: 30_000 },
    );
    expect(r.success).toBe(false);
    expect(r.error?.message).toMatch(/memory limit|MemoryError/);
    expect((await s.commands.run("echo still-here")).stdout).toBe("still-here\n");
  }, 60_000);

  it("cannot reach another sandbox's sandboxd without its token", async () => {
    const other = await p.create({ language: "python", threadId: "neighbour" });
    try {
      const ip = await docker(
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        other.sandboxId,
      );
      const code = `import urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request("http://${ip}:8080/v1/commands/run", data=b'{"command":"id"}', headers={"content-type": "application/json"}), timeout=5)
    print("reached")
except urllib.error.HTTPError as e:
    print(e.code)`;
      expect((await s.executeCode(code, "python")).stdout.trim()).toBe("401");
    } finally {
      await other.kill();
    }
  }, 120_000);
});

describe("faults", () => {
  it("a container removed from outside is NOT_FOUND; one stopped from outside comes back", async () => {
    const p = provider();
    const s = await p.create({ language: "python", threadId: "outside" });
    await s.filesystem.write("f.txt", "1");
    await docker("kill", s.sandboxId);
    // The first call may fail (it was cut off); it never hangs, and the sandbox comes back.
    const first = await s.commands.run("echo back").then(
      (r) => r.stdout,
      (e: { code: string }) => e.code,
    );
    expect(["back\n", "CONNECTION_FAILED"]).toContain(first);
    expect((await s.commands.run("cat f.txt")).stdout).toBe("1");
    await docker("rm", "-f", s.sandboxId);
    await expectSandboxError(s.commands.run("echo gone"), "NOT_FOUND");
    await expectSandboxError(p.resume(s.sandboxId), "NOT_FOUND");
    await s.kill();
    await p.close();
  }, 120_000);

  it("a Docker engine that is not running is CONNECTION_FAILED saying how to start it, and the chain moves on", async () => {
    const dir = await mkdtemp(join(tmpdir(), "sandpit-nodocker-"));
    try {
      const lonely = new DockerProvider({ image, socketPath: join(dir, "docker.sock") });
      const err = await expectSandboxError(
        lonely.create({ language: "python" }),
        "CONNECTION_FAILED",
      );
      expect(err.message).toMatch(/start it/);
      const chain = createProvider(
        {
          use: ["docker", "local"],
          docker: { image, socketPath: join(dir, "docker.sock") },
          local: { baseDir: join(dir, "local"), isolation: "none" },
        },
        { logger: pino({ level: "silent" }) },
      );
      const s = await chain.create({ language: "python" });
      expect((await s.commands.run("echo via-local")).stdout).toBe("via-local\n");
      await s.kill();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("uses Docker on macOS too when it answers", async () => {
    expect(await detectRuntime({ runtime: "auto" }, undefined, "darwin")).toBeInstanceOf(
      DockerRuntime,
    );
  });

  it("a missing image is a clear error, not a pull", async () => {
    const p = provider({ image: "sandpit-sandbox:does-not-exist" });
    const err = await expectSandboxError(p.create({ language: "python" }), "EXECUTION_FAILED");
    expect(err.message).toContain("images/build.ts");
  });
});

describe("network off", () => {
  // Targets only what this test makes: an internal Docker network and a server container on it
  // that answers every connection with a value no other listener could know.
  const net = `${PREFIX}-net`;
  const secret = `served-on-${net}-${randomUUID()}`;
  let serverIp = "";
  const read = () =>
    `python3 -c "import socket; print(socket.create_connection(('${serverIp}', 7000), timeout=3).recv(200).decode())"`;
  beforeAll(async () => {
    await docker("network", "rm", net).catch(() => undefined);
    await docker("network", "create", "--internal", net);
    const serve = `import socket
s = socket.create_server(("0.0.0.0", 7000))
while True:
    c, _ = s.accept()
    c.sendall(${JSON.stringify(secret)}.encode())
    c.close()`;
    await docker(
      "run",
      "-d",
      "--name",
      `${PREFIX}-netsrv`,
      "--network",
      net,
      "--entrypoint",
      "python3",
      image,
      "-c",
      serve,
    );
    serverIp = await docker(
      "inspect",
      "-f",
      `{{(index .NetworkSettings.Networks "${net}").IPAddress}}`,
      `${PREFIX}-netsrv`,
    );
  }, 120_000);
  afterAll(async () => {
    await docker("rm", "-f", `${PREFIX}-netsrv`).catch(() => undefined);
    await docker("network", "rm", net).catch(() => undefined);
  });

  it("a sandbox with network on reaches the test's server (the control)", async () => {
    const p = provider();
    const s = await p.create({ language: "python", threadId: "online" });
    try {
      await docker("network", "connect", net, s.sandboxId);
      let out = "";
      // The server container may still be starting.
      for (const deadline = Date.now() + 30_000; !out && Date.now() < deadline;) {
        out = (await s.commands.run(read())).stdout;
        if (!out) await new Promise((r) => setTimeout(r, 200));
      }
      expect(out).toBe(`${secret}\n`);
      expect((await s.commands.run("ls /sys/class/net")).stdout).toContain("eth0");
    } finally {
      await s.kill();
      await p.close();
    }
  }, 120_000);

  it("has no network at all, yet sandboxd and getHost work", async () => {
    const p = provider({ network: false });
    const s = await p.create({ language: "python", threadId: "offline" });
    try {
      expect(await docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", s.sandboxId)).toBe(
        "none",
      );
      expect((await s.commands.run("ls /sys/class/net")).stdout).toBe("lo\n");
      // The control's steps, attaching included: Docker refuses to attach a container without a
      // network, and the server stays out of reach.
      const attach = await docker("network", "connect", net, s.sandboxId).catch((e: Error) => e);
      expect(attach).toBeInstanceOf(Error);
      const out = await s.commands.run(read());
      expect(out.exitCode).not.toBe(0);
      expect(out.stdout + out.stderr).not.toContain(secret);
      await s.commands.run(
        "cd /mnt/user-data/workspace && echo page > p.html && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)",
      );
      const host = await s.getHost(8000);
      let body = "";
      for (let i = 0; i < 50 && !body; i++) {
        body = await fetch(`http://${host}/p.html`).then(
          (r) => (r.ok ? r.text() : ""),
          () => "",
        );
        if (!body) await new Promise((r) => setTimeout(r, 100));
      }
      expect(body).toBe("page\n");
    } finally {
      await s.kill();
      await p.close();
    }
  }, 120_000);
});
