/**
 * getHost(port) for sandboxes whose servers the caller cannot reach directly (containers,
 * network-less namespaces): a listener on 127.0.0.1 that opens one sandboxd tunnel per
 * incoming connection. Traffic stays on loopback; the sandbox's token guards the tunnel.
 */
import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import type { SandboxdClient } from "./sandboxd-client.ts";

export class PortForwarder {
  private readonly servers = new Map<number, Promise<{ server: Server; host: string }>>();
  private readonly client: () => Promise<SandboxdClient>;

  constructor(client: () => Promise<SandboxdClient>) {
    this.client = client;
  }

  /** host:port on 127.0.0.1 that reaches `port` inside the sandbox; one listener per port. */
  async forward(port: number): Promise<string> {
    let entry = this.servers.get(port);
    if (!entry) {
      entry = this.listen(port);
      this.servers.set(port, entry);
      entry.catch(() => this.servers.delete(port));
    }
    return (await entry).host;
  }

  async close(): Promise<void> {
    const all = await Promise.allSettled(this.servers.values());
    this.servers.clear();
    await Promise.all(
      all.map((s) =>
        s.status === "fulfilled"
          ? new Promise<void>((r) => s.value.server.close(() => r()))
          : undefined,
      ),
    );
  }

  private listen(port: number): Promise<{ server: Server; host: string }> {
    const server = createServer((socket: Socket) => {
      socket.pause();
      this.client()
        .then((c) => c.openTunnel(port))
        .then((tunnel) => {
          socket.pipe(tunnel);
          tunnel.pipe(socket);
          socket.resume();
          socket.once("close", () => tunnel.destroy());
          tunnel.once("close", () => socket.destroy());
          tunnel.once("error", () => socket.destroy());
          socket.once("error", () => tunnel.destroy());
        })
        .catch(() => socket.destroy());
    });
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => {
        server.unref(); // an open forward must not keep the process alive
        resolve({ server, host: `127.0.0.1:${(server.address() as AddressInfo).port}` });
      });
    });
  }
}
