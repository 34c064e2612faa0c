/**
 * The proxy's keep-alive pool to sandboxds (provisioner/src/proxy.ts): the connection serve opens
 * when a sandbox becomes Ready is the one its first proxied request uses, and later requests
 * reuse it too.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { preconnect, proxyRequest, type Target } from "../../provisioner/src/proxy.ts";

let sandboxd: Server;
let front: Server;
let target: Target;
let connections = 0;
const seen: string[] = [];

const listen = (s: Server) =>
  new Promise<number>((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));

beforeAll(async () => {
  // Stands in for sandboxd: counts TCP connections and checks the token.
  sandboxd = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    res.end("ok");
  });
  sandboxd.on("connection", () => connections++);
  target = { host: "127.0.0.1", port: await listen(sandboxd), token: "t0k" };
  front = createServer((req, res) => {
    void proxyRequest(req, res, target, req.url!, { kind: "sandboxd" }, () => undefined);
  });
  await listen(front);
});

afterAll(() => {
  front.closeAllConnections();
  sandboxd.closeAllConnections();
  front.close();
  sandboxd.close();
});

it("preconnect opens the connection the first proxied requests then reuse", async () => {
  preconnect(target);
  for (let i = 0; i < 100 && seen.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  expect(seen).toEqual(["GET /healthz Bearer t0k"]);
  await new Promise((r) => setTimeout(r, 20)); // the answer drained, the socket back in the pool
  const base = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
  for (const path of ["/v1/commands/run", "/v1/files"]) {
    const res = await fetch(`${base}${path}`, { method: "POST", body: "{}" });
    expect(await res.text()).toBe("ok");
  }
  expect(seen.slice(1)).toEqual(["POST /v1/commands/run Bearer t0k", "POST /v1/files Bearer t0k"]);
  expect(connections).toBe(1);
});
