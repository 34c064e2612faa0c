/**
 * The sandbox image on a real Docker engine (test/docker/global-setup.ts starts it and builds the
 * image): what is inside, that sandboxd serves commands and code cells through the published port
 * with its token, that pip and npm reach their registries from inside, and that all of it still
 * works hardened (read-only root, every capability dropped, no-new-privileges).
 */
import { randomBytes } from "node:crypto";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";

// Ryuk (testcontainers' reaper) is an image from a registry, which cannot be pulled here; the
// containers are removed in afterAll instead. Set before testcontainers is loaded, which reads it.
process.env.TESTCONTAINERS_RYUK_DISABLED = "true";
const image = inject("sandboxImage");
const socketPath = inject("dockerSocket");
if (!image || !socketPath)
  throw new Error(
    "sandboxImage/dockerSocket not provided: add test/docker/global-setup.ts to vitest's globalSetup",
  );
process.env.DOCKER_HOST ??= `unix://${socketPath}`;
const { GenericContainer, Wait } = await import("testcontainers");
type Started = Awaited<ReturnType<InstanceType<typeof GenericContainer>["start"]>>;

const docker = new Docker({ socketPath });
const TOKEN = randomBytes(24).toString("hex");
const INSTALL_TIMEOUT_MS = 180_000;

/**
 * testcontainers publishes ports on every interface and has no read-only-root or volume option;
 * its protected host config is adjusted here instead, so the rest of its API (wait strategies,
 * mapped ports, cleanup) still applies.
 */
class SandboxContainer extends GenericContainer {
  constructor() {
    super(image);
    this.withEnvironment({ SANDBOXD_TOKEN: TOKEN })
      .withExposedPorts(8080)
      .withWaitStrategy(Wait.forHealthCheck())
      .withStartupTimeout(60_000);
  }

  /** The hardening the Docker provider applies: read-only root, tmpfs /tmp, a volume, no capabilities. */
  hardened(volume: string): this {
    this.hostConfig.ReadonlyRootfs = true;
    this.hostConfig.Mounts = [{ Type: "volume", Source: volume, Target: "/mnt/user-data" }];
    return this.withTmpFs({ "/tmp": "rw,nosuid,nodev,size=512m,mode=1777" })
      .withDroppedCapabilities("ALL")
      .withSecurityOpt("no-new-privileges");
  }

  override async start(): Promise<Started> {
    // Bind the published port on loopback only: nothing here listens beyond this machine.
    for (const bindings of Object.values(this.hostConfig.PortBindings ?? {}) as {
      HostIp?: string;
    }[][]) {
      for (const b of bindings) b.HostIp = "127.0.0.1";
    }
    return super.start();
  }
}

/** A minimal sandboxd client: just enough HTTP to assert on. */
function sandboxd(container: Started, token = TOKEN) {
  const base = `http://127.0.0.1:${container.getMappedPort(8080)}`;
  const post = async <T>(path: string, body: unknown): Promise<{ status: number; body: T }> => {
    const res = await fetch(base + path, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
  type Ran = { exitCode: number; stdout: string; stderr: string; timedOut: boolean };
  type Cell = { success: boolean; output?: unknown; stdout: string; stderr: string };
  return {
    base,
    post,
    async run(
      command: string,
      o: { env?: Record<string, string>; timeoutMs?: number } = {},
    ): Promise<Ran> {
      const r = await post<Ran>("/v1/commands/run", { command, ...o });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body;
    },
    async code(language: "python" | "typescript", code: string): Promise<Cell> {
      const r = await post<Cell>("/v1/code/execute", { language, code });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body;
    },
    async install(language: "python" | "typescript", packages: string[]): Promise<void> {
      const r = await post<unknown>("/v1/packages/install", {
        language,
        packages,
        timeoutMs: INSTALL_TIMEOUT_MS,
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    },
  };
}

/** `run` with a readable failure: the command's own output is the message. */
function ok(r: { exitCode: number; stdout: string; stderr: string }): string {
  expect(r.exitCode, `exit ${r.exitCode}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`).toBe(0);
  return r.stdout;
}

describe("sandbox image", () => {
  it("is configured as documented: uid 1000, workspace, port 8080, healthcheck, tini + sandboxd", async () => {
    const info = await docker.getImage(image).inspect();
    expect(info.Config.User).toBe("1000:1000");
    expect(info.Config.WorkingDir).toBe("/mnt/user-data/workspace");
    expect(Object.keys(info.Config.ExposedPorts ?? {})).toEqual(["8080/tcp"]);
    expect(info.Config.Entrypoint).toEqual([
      "/usr/bin/tini",
      "--",
      "/opt/sandpit/node/bin/node",
      "/opt/sandpit/sandboxd/dist/sandboxd.mjs",
    ]);
    const health = (info.Config as { Healthcheck?: { Test?: string[] } }).Healthcheck;
    expect(health?.Test?.join(" ")).toContain("/opt/sandpit/sandboxd/healthcheck.mjs");
    expect(info.Config.Env).toEqual(
      expect.arrayContaining([
        "SANDBOXD_LISTEN=0.0.0.0:8080",
        "SANDBOXD_PYTHON=/usr/bin/python3",
        "SANDBOXD_PYTHON_PREFIX=/usr",
        "SANDBOXD_AIO_PATHS=any",
        // The link to the workspace (E2B programs' home; writable on a read-only root).
        "HOME=/home/user",
      ]),
    );
    const latest = await docker.getImage("sandpit-sandbox:latest").inspect();
    expect(latest.Id).toBe(info.Id);
  });

  describe("a default container", () => {
    let container: Started;
    let sbx: ReturnType<typeof sandboxd>;
    beforeAll(async () => {
      container = await new SandboxContainer().start();
      sbx = sandboxd(container);
    });
    afterAll(async () => {
      await container?.stop({ remove: true, removeVolumes: true });
    });

    it("reaches healthy through its HEALTHCHECK", async () => {
      const state = (await docker.getContainer(container.getId()).inspect()).State as {
        Health?: { Status: string };
      };
      expect(state.Health?.Status).toBe("healthy");
      const res = await fetch(`${sbx.base}/healthz`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ ok: true });
    });

    it("refuses a request without the token", async () => {
      const res = await fetch(`${sbx.base}/v1/commands/run`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ command: "true" }),
      });
      expect(res.status).toBe(401);
    });

    it("runs commands as uid 1000 in the workspace", async () => {
      const out = ok(await sbx.run('id -u; id -g; id -un; pwd; echo "$HOME"'));
      expect(out.split("\n").slice(0, 5)).toEqual([
        "1000",
        "1000",
        "sandpit",
        "/mnt/user-data/workspace",
        "/home/user",
      ]);
    });

    it("has python3, pip, node 24, npm and npx on PATH", async () => {
      const out = ok(
        await sbx.run(
          "python3 --version; pip --version; node --version; npm --version; npx --version",
        ),
      );
      const [py, pip, node, npm, npx] = out.trim().split("\n");
      expect(py).toMatch(/^Python 3\.\d+\.\d+$/);
      expect(pip).toMatch(/^pip \d+/);
      expect(node).toMatch(/^v24\./);
      expect(npm).toMatch(/^\d+\.\d+\.\d+$/);
      expect(npx).toBe(npm);
    });

    it("has node, npm and npx in a login shell too (its PATH comes from /etc/profile)", async () => {
      const out = ok(await sbx.run(`bash -l -c 'node --version; npm --version; npx --version'`));
      const [node, npm, npx] = out.trim().split("\n");
      expect(node).toMatch(/^v24\./);
      expect(npm).toMatch(/^\d+\.\d+\.\d+$/);
      expect(npx).toBe(npm);
    });

    it("has git and python3 -m venv", async () => {
      const out = ok(
        await sbx.run(
          "git --version && python3 -m venv /tmp/venv && . /tmp/venv/bin/activate && pip --version",
        ),
      );
      expect(out).toMatch(/^git version \d+/);
      expect(out).toContain("/tmp/venv/");
    });

    it("serves a command, a python cell and a typescript cell", async () => {
      const r = await sbx.run("echo hello; echo oops >&2; exit 3");
      expect(r).toMatchObject({
        exitCode: 3,
        stdout: "hello\n",
        stderr: "oops\n",
        timedOut: false,
      });
      const py = await sbx.code(
        "python",
        'import json, sys; print(json.dumps({"py": sys.version_info[0]}))',
      );
      expect(py).toMatchObject({ success: true, output: { py: 3 } });
      const ts = await sbx.code(
        "typescript",
        "const n: number = 21; console.log(JSON.stringify({ ts: n * 2, node: process.versions.node.split('.')[0] }))",
      );
      expect(ts).toMatchObject({ success: true, output: { ts: 42, node: "24" } });
      const err = await sbx.code("python", "raise ValueError('bad')");
      expect(err.success).toBe(false);
    });

    it(
      "installs from PyPI and npm inside the sandbox: plain pip/npm in a command, and through sandboxd",
      async () => {
        // A plain `pip install` meets Debian's PEP 668 guard; the image lets it fall back to a user install.
        ok(await sbx.run("pip install six==1.16.0", { timeoutMs: INSTALL_TIMEOUT_MS }));
        expect(ok(await sbx.run('python3 -c "import six; print(six.__version__)"')).trim()).toBe(
          "1.16.0",
        );
        ok(await sbx.run("npm install is-number@7.0.0", { timeoutMs: INSTALL_TIMEOUT_MS }));
        expect(ok(await sbx.run("node -e \"console.log(require('is-number')(7))\"")).trim()).toBe(
          "true",
        );
        // sandboxd's own install path (SandboxCreateOptions.packages): pip --target, npm --prefix.
        await sbx.install("python", ["six==1.16.0"]);
        await sbx.install("typescript", ["is-number@7.0.0"]);
        const py = await sbx.code("python", "import six, json; print(json.dumps(six.__version__))");
        expect(py).toMatchObject({ success: true, output: "1.16.0" });
        const ts = await sbx.code(
          "typescript",
          "import isNumber from 'is-number'; console.log(JSON.stringify(isNumber(5)))",
        );
        expect(ts).toMatchObject({ success: true, output: true });
      },
      INSTALL_TIMEOUT_MS * 2,
    );
  });

  describe("hardened: read-only root, tmpfs /tmp, a volume, no capabilities, no-new-privileges", () => {
    const volume = `sandpit-image-test-${randomBytes(4).toString("hex")}`;
    let container: Started;
    let sbx: ReturnType<typeof sandboxd>;
    beforeAll(async () => {
      await docker.createVolume({ Name: volume });
      // A writable HOME: /home/sandpit is on the read-only root. On the volume, user installs
      // (~/.local) survive pause/resume.
      container = await new SandboxContainer()
        .hardened(volume)
        .withEnvironment({ SANDBOXD_ENV: JSON.stringify({ HOME: "/mnt/user-data/.sandpit/home" }) })
        .start();
      sbx = sandboxd(container);
    });
    afterAll(async () => {
      await container?.stop({ remove: true, removeVolumes: true });
      await docker
        .getVolume(volume)
        .remove()
        .catch(() => undefined);
    });

    it("reaches healthy and runs with no capabilities and no-new-privileges, on a read-only root", async () => {
      const info = await docker.getContainer(container.getId()).inspect();
      expect((info.State as { Health?: { Status: string } }).Health?.Status).toBe("healthy");
      expect(info.HostConfig.ReadonlyRootfs).toBe(true);
      const status = ok(await sbx.run("grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status"));
      expect(status).toMatch(/CapEff:\s+0{16}/);
      expect(status).toMatch(/CapPrm:\s+0{16}/);
      expect(status).toMatch(/NoNewPrivs:\s+1/);
      const ro = await sbx.run(
        "touch /opt/sandpit/x 2>&1; touch /etc/x 2>&1; touch /tmp/x && touch /mnt/user-data/workspace/x && echo writable",
      );
      expect(ro.stdout).toMatch(/Read-only file system[\s\S]*Read-only file system[\s\S]*writable/);
      expect(ok(await sbx.run("id -u")).trim()).toBe("1000");
    });

    it("serves a command, a python cell and a typescript cell", async () => {
      expect(ok(await sbx.run("echo hardened")).trim()).toBe("hardened");
      expect(await sbx.code("python", "print(6 * 7)")).toMatchObject({ success: true, output: 42 });
      expect(
        await sbx.code("typescript", "const s: string = 'ts'; console.log(JSON.stringify(s))"),
      ).toMatchObject({ success: true, output: "ts" });
    });

    it(
      "installs packages with pip and npm: from a command and through sandboxd",
      async () => {
        // First from a command: a user install into $HOME/.local, which must be writable (SANDBOXD_ENV above).
        const home = ok(
          await sbx.run('pip install six==1.16.0 && python3 -c "import six; print(six.__file__)"', {
            timeoutMs: INSTALL_TIMEOUT_MS,
          }),
        );
        expect(home).toContain("/mnt/user-data/.sandpit/home/.local/");
        ok(await sbx.run("npm install is-number@7.0.0", { timeoutMs: INSTALL_TIMEOUT_MS }));
        // Then through sandboxd, into its own state directory on the volume.
        await sbx.install("python", ["six==1.16.0"]);
        await sbx.install("typescript", ["is-number@7.0.0"]);
        expect(
          await sbx.code(
            "python",
            "import json, six; print(json.dumps(six.__version__ == '1.16.0'))",
          ),
        ).toMatchObject({ success: true, output: true });
        expect(
          await sbx.code(
            "typescript",
            "import isNumber from 'is-number'; console.log(isNumber('3'))",
          ),
        ).toMatchObject({ success: true, output: true });
      },
      INSTALL_TIMEOUT_MS * 2,
    );
  });
});
