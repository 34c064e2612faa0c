/**
 * The API client keeps its connections: client-node hands each request a dispatcher of its own,
 * and used as given every request opened a TLS connection of its own.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Kube } from "../src/kube/rest.ts";

let server: Server;
let dir: string;
let connections = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "rest-test-"));
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-keyout",
      join(dir, "key.pem"),
      "-out",
      join(dir, "cert.pem"),
    ],
    { stdio: "ignore" },
  );
  server = createServer(
    { key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) },
    (_req, res) => res.writeHead(200, { "content-type": "application/json" }).end("{}"),
  );
  server.on("secureConnection", () => connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
});

afterAll(() => {
  server?.closeAllConnections();
  server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("requests reuse one connection pool to the API server", async () => {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: "c",
        server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
        skipTLSVerify: true,
      },
    ],
    users: [{ name: "u", token: "t" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const kube = new Kube(kc, { fieldManager: "test" });
  for (let i = 0; i < 20; i++) await kube.request("GET", "/api/v1/namespaces/default");
  // One, or two when the pool opens another while the first is handed back; 20 without reuse.
  expect(connections).toBeLessThanOrEqual(2);
});
