/**
 * TEST HARNESS, not the product: a minimal E2B control plane (create, get, connect, timeout,
 * kill) over LocalProvider sandboxes, in front of the real data-plane translator
 * (provisioner/src/api/e2b/envd), so the official E2B SDKs can be run against the translator
 * without a cluster. The real control plane (keys, tenants, pools, pause, list) is the
 * provisioner's E2B API; this exists only for test/e2b-compat/*.test.ts.
 *
 * Point an SDK at it with `apiUrl` and `sandboxUrl` both set to `url` (data-plane requests carry
 * the E2b-Sandbox-Id header, signed /files URLs carry a signature instead).
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { LocalProvider, type SandboxInstance } from "@sandpit/sdk";
import {
  ENVD_PORT,
  ENVD_VERSION,
  filesSignatureValid,
  serveEnvd,
  type EnvdTarget,
} from "../../provisioner/src/api/e2b/envd/index.ts";

export const HARNESS_API_KEY = `e2b_${"1".repeat(40)}`;

interface Entry {
  target: EnvdTarget;
  templateID: string;
  metadata: Record<string, string>;
  startedAt: Date;
}

export class LocalE2BHarness {
  readonly provider: LocalProvider;
  private readonly server: Server;
  private readonly sandboxes = new Map<string, Entry>();
  url = "";

  constructor(baseDir: string) {
    this.provider = new LocalProvider({ baseDir, isolation: "none" });
    this.server = createServer((req, res) => {
      this.route(req, res).catch((err: unknown) => {
        if (!res.headersSent) {
          res.writeHead(500, { "content-type": "application/json" });
          res.end(JSON.stringify({ code: 500, message: String(err) }));
        } else res.destroy();
      });
    });
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const e of this.sandboxes.values()) await e.target.instance.kill().catch(() => undefined);
    await this.provider.close();
  }

  instance(id: string): SandboxInstance | undefined {
    return this.sandboxes.get(id)?.target.instance;
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = req.url ?? "/";
    const url = new URL(path, this.url);
    const sid = req.headers["e2b-sandbox-id"];
    if (typeof sid === "string") {
      const e = this.sandboxes.get(sid);
      if (!e) return text(res, 502, `The sandbox ${sid} was not found`);
      return serveEnvd(
        req,
        res,
        path,
        Number(req.headers["e2b-sandbox-port"] ?? ENVD_PORT),
        e.target,
      );
    }
    if (url.pathname === "/files" && url.searchParams.has("signature")) {
      const e = [...this.sandboxes.values()].find((x) =>
        filesSignatureValid(path, x.target.accessToken),
      );
      if (!e) return json(res, 401, { code: 401, message: "invalid signature" });
      return serveEnvd(req, res, path, ENVD_PORT, e.target);
    }
    if (req.headers["x-api-key"] !== HARNESS_API_KEY)
      return json(res, 401, { code: 401, message: "Invalid API key" });
    const m = /^(?:\/v2)?\/sandboxes(?:\/([^/]+))?(?:\/(connect|timeout|refreshes))?$/.exec(
      url.pathname,
    );
    if (!m) return json(res, 404, { code: 404, message: `no route ${url.pathname}` });
    const [, id, action] = m;
    const body = await readJson(req);
    if (!id && req.method === "POST") {
      const instance = await this.provider.create({
        language: "python",
        envs: (body.envVars as Record<string, string>) ?? {},
      });
      const entry: Entry = {
        target: {
          sandboxId: instance.sandboxId,
          instance,
          accessToken: randomBytes(24).toString("base64url"),
          envdVersion: ENVD_VERSION,
        },
        templateID: (body.templateID as string) ?? "base",
        metadata: (body.metadata as Record<string, string>) ?? {},
        startedAt: new Date(),
      };
      this.sandboxes.set(instance.sandboxId, entry);
      return json(res, 201, summary(entry));
    }
    const e = id ? this.sandboxes.get(id) : undefined;
    if (!e) return json(res, 404, { code: 404, message: `sandbox ${id} not found` });
    if (req.method === "GET" && !action)
      return json(res, 200, {
        ...summary(e),
        alias: e.templateID,
        startedAt: e.startedAt.toISOString(),
        endAt: new Date(e.startedAt.getTime() + 3600_000).toISOString(),
        cpuCount: 1,
        memoryMB: 512,
        diskSizeMB: 1024,
        metadata: e.metadata,
        state: "running",
      });
    if (req.method === "DELETE" && !action) {
      this.sandboxes.delete(e.target.sandboxId);
      await e.target.instance.kill();
      res.writeHead(204).end();
      return;
    }
    if (req.method === "POST" && action === "connect") return json(res, 200, summary(e));
    if (req.method === "POST") {
      res.writeHead(204).end();
      return;
    }
    return json(res, 405, { code: 405, message: "method not allowed" });
  }
}

function summary(e: Entry) {
  return {
    sandboxID: e.target.sandboxId,
    templateID: e.templateID,
    clientID: "harness",
    envdVersion: e.target.envdVersion,
    envdAccessToken: e.target.accessToken,
    domain: null,
  };
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const t = Buffer.concat(chunks).toString("utf8");
  return t ? (JSON.parse(t) as Record<string, unknown>) : {};
}

function json(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(value));
}

function text(res: ServerResponse, status: number, value: string): void {
  res.writeHead(status, { "content-type": "text/plain" });
  res.end(value);
}
