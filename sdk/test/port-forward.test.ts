/** getHost through sandboxd's port tunnel: a network-less sandbox's server reached from the host. */
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalProvider, SandboxdClient, type SandboxInstance } from "@sandpit/sdk";
import { expectSandboxError } from "../../test/contract/suite.ts";
import { bwrapAvailable } from "../src/providers/local/bwrap.ts";

const available = await bwrapAvailable();
if (!available && process.env.CI) throw new Error("bubblewrap must be installed in CI");

const title = "port tunnel (local provider, bubblewrap, no network)";
const named = available ? title : `${title} (skipped: bubblewrap is not available)`;
describe.skipIf(!available)(named, () => {
  let baseDir: string;
  let provider: LocalProvider;
  let sbx: SandboxInstance;
  beforeAll(async () => {
    baseDir = await mkdtemp(join(tmpdir(), "sandpit-tunnel-"));
    provider = new LocalProvider({ baseDir, isolation: "bwrap", network: false });
    sbx = await provider.create({ language: "python", threadId: "tunnel" });
  });
  afterAll(async () => {
    await sbx?.kill();
    await provider?.close();
    await rm(baseDir, { recursive: true, force: true });
  });

  it("cannot reach the host's loopback, which a sandbox with network on reaches", async () => {
    // A server only this test runs, on the host's 127.0.0.1: it answers with a value no other
    // listener could know.
    const secret = `host-server-${randomUUID()}`;
    const server = createServer((socket) => socket.end(secret));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const read = `python3 -c "import socket; print(socket.create_connection(('127.0.0.1', ${port}), timeout=5).recv(200).decode())"`;
    const online = new LocalProvider({ baseDir, isolation: "bwrap", network: true });
    try {
      const control = await online.create({ language: "python", threadId: "online" });
      expect((await control.commands.run(read)).stdout).toBe(`${secret}\n`);
      await control.kill();
      const out = await sbx.commands.run(read);
      expect(out.exitCode).not.toBe(0);
      expect(out.stdout + out.stderr).not.toContain(secret);
    } finally {
      await online.close();
      server.close();
    }
  });

  it("reaches its server through getHost, a tunnel per connection", async () => {
    await sbx.filesystem.write("site/hello.txt", "hello through the tunnel");
    await sbx.commands.run(
      "cd site && (python3 -m http.server 8765 --bind 127.0.0.1 > /dev/null 2>&1 &)",
    );
    const host = await sbx.getHost(8765);
    expect(host).toMatch(/^127\.0\.0\.1:\d+$/);
    let body = "";
    for (let i = 0; i < 50 && !body; i++) {
      body = await fetch(`http://${host}/hello.txt`).then(
        (r) => (r.ok ? r.text() : ""),
        () => "",
      );
      if (!body) await new Promise((r) => setTimeout(r, 100));
    }
    expect(body).toBe("hello through the tunnel");
    // Several connections at once each get their own tunnel.
    const many = await Promise.all(
      Array.from({ length: 8 }, () => fetch(`http://${host}/hello.txt`).then((r) => r.text())),
    );
    expect(new Set(many)).toEqual(new Set(["hello through the tunnel"]));
  });

  it("refuses a tunnel without the token, and says when nothing listens", async () => {
    const lifecycle = (sbx as unknown as { lifecycle: { connect(): Promise<SandboxdClient> } })
      .lifecycle;
    const client = await lifecycle.connect();
    await expectSandboxError(client.openTunnel(8799), "EXECUTION_FAILED");
    const socketPath = (client as unknown as { socketPath: string }).socketPath;
    const stranger = new SandboxdClient({
      baseUrl: "http://sandboxd",
      socketPath,
      token: "x".repeat(64),
    });
    await expectSandboxError(stranger.openTunnel(8765), "UNAUTHORIZED");
    await stranger.close();
  });
});
