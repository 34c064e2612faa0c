/**
 * The sandboxd client over https (a sandboxd behind a TLS proxy or ingress): node:https is
 * loaded only for such a client (sdk/src/sandboxd-client.ts), and it must still verify the
 * server's certificate and send its server name. A real TLS server on 127.0.0.1 with a
 * certificate made here by openssl for `localhost`.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import os from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxdClient } from "../src/sandboxd-client.ts";

let dir: string;
let server: Server;
let port: number;
const seen: { servername: string | undefined; authorization: string | undefined }[] = [];
const defaultCAs = tls.getCACertificates("default");

beforeAll(async () => {
  dir = mkdtempSync(join(os.tmpdir(), "sandpit-https-"));
  execFileSync("openssl", [
    ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1"],
    ...["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
  ]);
  server = createServer(
    { key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) },
    (req, res) => {
      const socket = req.socket as tls.TLSSocket;
      seen.push({
        servername: (socket as { servername?: string | false }).servername || undefined,
        authorization: req.headers.authorization,
      });
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ status: "ok", idleMs: 0 }));
    },
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  tls.setDefaultCACertificates(defaultCAs);
  await new Promise((r) => server.close(r));
  rmSync(dir, { recursive: true, force: true });
});

describe("SandboxdClient over https", () => {
  it("refuses a server whose certificate it does not trust", async () => {
    const client = new SandboxdClient({ baseUrl: `https://localhost:${port}`, token: "t" });
    try {
      await expect(client.health()).rejects.toMatchObject({ code: "CONNECTION_FAILED" });
    } finally {
      await client.destroy();
    }
  });

  it("reaches a trusted one, sending its server name and the token", async () => {
    tls.setDefaultCACertificates([...defaultCAs, readFileSync(join(dir, "cert.pem"), "utf8")]);
    const client = new SandboxdClient({ baseUrl: `https://localhost:${port}`, token: "t0k" });
    try {
      seen.length = 0;
      await expect(client.health()).resolves.toMatchObject({ status: "ok" });
      expect(seen).toEqual([{ servername: "localhost", authorization: "Bearer t0k" }]);
    } finally {
      await client.destroy();
    }
  });
});
