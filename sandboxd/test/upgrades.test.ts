/**
 * The upgrade dispatcher with routes that load what they need on first use (pty-routes.ts loads
 * ws on the first terminal connection): a route that finishes asynchronously is served, and one
 * that fails asynchronously gets the same 500 envelope as one that throws, never a hung socket.
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Activity } from "../src/activity.ts";
import { TokenGate } from "../src/token-gate.ts";
import { attachUpgrades } from "../src/upgrades.ts";

const TOKEN = "t".repeat(40);
let server: Server;
let port: number;
const activity = new Activity();

beforeAll(async () => {
  server = createServer();
  attachUpgrades(
    server,
    new TokenGate(TOKEN),
    [
      {
        path: /^\/late$/,
        async handle(_req, socket) {
          await import("node:zlib"); // stands for a module loaded on first use
          socket.end(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n",
          );
        },
      },
      {
        path: /^\/broken$/,
        async handle() {
          await Promise.resolve();
          throw new Error("could not load");
        },
      },
    ],
    pino({ level: "silent" }),
    activity,
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  activity.stop();
  await new Promise((r) => server.close(r));
});

/** An upgrade request: the status line and body of the answer, or the 101. */
function upgrade(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path,
      headers: { connection: "upgrade", upgrade: "x", authorization: `Bearer ${TOKEN}` },
    });
    req.once("upgrade", (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, body: "" });
    });
    req.once("response", (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.once("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.once("error", reject);
    req.end();
  });
}

describe("upgrade routes", () => {
  it("serves a route that finishes after an asynchronous load", async () => {
    expect((await upgrade("/late")).status).toBe(101);
  });

  it("answers 500 in the error envelope when a route fails asynchronously", async () => {
    const r = await upgrade("/broken");
    expect(r.status).toBe(500);
    expect(JSON.parse(r.body)).toEqual({ error: { code: "INTERNAL", message: "internal error" } });
  });
});
