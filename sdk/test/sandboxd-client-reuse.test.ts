/**
 * A pooled connection that the server closes as idle just as the client's next call goes out
 * on it: the call fails with ECONNRESET though the server never read it. The sandboxd client
 * sends an idempotent call again on a new connection; a POST (which may run a command twice)
 * fails as before. The server here answers the first request of each connection and resets
 * the connection on the second, the race made certain.
 */
import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxdClient } from "../src/sandboxd-client.ts";

let server: Server;
let port: number;
let connections = 0;
const seen: string[] = [];

beforeAll(async () => {
  server = createServer((socket: Socket) => {
    connections++;
    let requests = 0;
    let buffered = "";
    socket.on("data", (chunk) => {
      buffered += chunk.toString();
      while (buffered.includes("\r\n\r\n")) {
        const end = buffered.indexOf("\r\n\r\n") + 4;
        const head = buffered.slice(0, end);
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (buffered.length < end + length) return;
        buffered = buffered.slice(end + length);
        if (++requests > 1) {
          socket.resetAndDestroy(); // "closed as idle" as this request arrived
          return;
        }
        seen.push(head.split(" ", 2).join(" "));
        const body = JSON.stringify({ name: "x", path: "/x", type: "file", size: 1 });
        socket.write(
          `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: keep-alive\r\n\r\n${body}`,
        );
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise((r) => server.close(r)));

describe("a kept-alive connection closed under a call", () => {
  it("sends a GET again on a new connection", async () => {
    const client = new SandboxdClient({ baseUrl: `http://127.0.0.1:${port}`, token: "t" });
    try {
      seen.length = 0;
      connections = 0;
      await client.stat("/x"); // opens the connection, which the pool keeps
      await expect(client.stat("/x")).resolves.toMatchObject({ name: "x" });
      expect(seen).toEqual(["GET /v1/files/stat?path=%2Fx", "GET /v1/files/stat?path=%2Fx"]);
      expect(connections).toBe(2);
    } finally {
      await client.destroy();
    }
  });

  it("does not send a POST again: it fails, the command not run twice", async () => {
    const client = new SandboxdClient({ baseUrl: `http://127.0.0.1:${port}`, token: "t" });
    try {
      seen.length = 0;
      await client.stat("/x");
      await expect(
        client.send("POST", "/v1/commands/run", { body: JSON.stringify({ command: "true" }) }),
      ).rejects.toMatchObject({ code: "CONNECTION_FAILED" });
      expect(seen).toEqual(["GET /v1/files/stat?path=%2Fx"]);
    } finally {
      await client.destroy();
    }
  });
});
