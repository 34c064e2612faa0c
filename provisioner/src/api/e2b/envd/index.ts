/**
 * E2B's data plane, translated onto a SandboxInstance (so it runs over any sandboxd-backed
 * provider): envd on port 49983 (Connect-RPC `process.Process` and `filesystem.Filesystem`,
 * REST `/files`, `/health`, `/metrics`) and the code interpreter on 49999 (`/execute`,
 * `/contexts`). The dispatcher (../index.ts) finds the sandbox and calls `serveEnvd`; the wire
 * details are in docs/e2b.md, "Data plane".
 */
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { SandboxInstance } from "@sandpit/sdk";
import { callShape, RpcError, sendError, toRpcError } from "./connect.ts";
import { checkSignature, requestUrl, restStatus, sendRestError, serveFiles } from "./files.ts";

export { requestUrl };
import { serveFilesystem } from "./filesystem.ts";
import { sendText, serveInterpreter } from "./interpreter.ts";
import { serveMetrics } from "./metrics.ts";
import { serveProcess } from "./process.ts";

export { filesSignatureValid } from "./files.ts";

export const ENVD_PORT = 49983;
export const INTERPRETER_PORT = 49999;

/**
 * The envd version we report. The SDKs gate features on it (docs/e2b.md, "Data plane"): 0.5.7 turns
 * on everything served here (stdin control 0.3.0, no default username 0.4.0, closeStdin 0.5.2,
 * octet-stream uploads 0.5.7, recursive watch 0.1.4) and nothing that is not (file metadata
 * 0.6.2, entry info in watch events 0.6.3, network-mount watches 0.6.4).
 */
export const ENVD_VERSION = "0.5.7";

export interface EnvdTarget {
  sandboxId: string;
  instance: SandboxInstance;
  /** Verifies `X-Access-Token` and /files signatures. */
  accessToken: string;
  envdVersion: string;
}

function tokenMatches(req: IncomingMessage, token: string): boolean {
  const given = req.headers["x-access-token"];
  if (typeof given !== "string" || !token) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Serves one data-plane request for port 49983 (envd) or 49999 (code interpreter). */
export async function serveEnvd(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  port: number,
  target: EnvdTarget,
): Promise<void> {
  const url = requestUrl(path);
  if (port === INTERPRETER_PORT) return interpreter(req, res, url, target);
  if (port !== ENVD_PORT) return sendRestError(res, 404, `port ${port} is not served here`);
  const rpc = /^\/(process\.Process|filesystem\.Filesystem)\/([A-Za-z]+)$/.exec(url.pathname);
  try {
    if (rpc) return await connectCall(req, res, rpc[1]!, rpc[2]!, target);
    if (url.pathname === "/health") {
      res.writeHead(204).end();
      return;
    }
    if (url.pathname === "/files") {
      // A signed URL carries its own proof; everything else needs the access token.
      if (url.searchParams.has("signature"))
        checkSignature(req, url.searchParams, target.accessToken);
      else if (!tokenMatches(req, target.accessToken))
        return sendRestError(res, 401, "invalid access token");
      return await serveFiles(req, res, url.searchParams, target.instance);
    }
    if (!tokenMatches(req, target.accessToken))
      return sendRestError(res, 401, "invalid access token");
    if (url.pathname === "/metrics" && req.method === "GET")
      return await serveMetrics(res, target.instance);
    return sendRestError(res, 404, `no route ${req.method} ${url.pathname}`);
  } catch (err) {
    drain(req);
    return sendRestError(res, restStatus(err), (err as Error).message);
  }
}

async function connectCall(
  req: IncomingMessage,
  res: ServerResponse,
  service: string,
  method: string,
  target: EnvdTarget,
): Promise<void> {
  try {
    if (req.method !== "POST")
      throw new RpcError("unimplemented", `${service}/${method} takes POST`, 405);
    if (!tokenMatches(req, target.accessToken))
      throw new RpcError("unauthenticated", "invalid access token");
    const shape = callShape(req);
    if (service === "process.Process") await serveProcess(method, req, res, shape, target.instance);
    else await serveFilesystem(method, req, res, shape, target.instance);
  } catch (err) {
    drain(req);
    sendError(res, toRpcError(err));
  }
}

/**
 * The code interpreter. E2B's SDKs send the access token with /execute only (not with the
 * context calls), so the token is required there and checked on the others when sent.
 */
async function interpreter(
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  target: EnvdTarget,
) {
  const sent = req.headers["x-access-token"] !== undefined;
  const needed = url.pathname === "/execute";
  if ((needed || sent) && !tokenMatches(req, target.accessToken)) {
    drain(req);
    return sendText(res, 401, "invalid access token");
  }
  try {
    await serveInterpreter(req, res, url.pathname, target.instance);
  } catch (err) {
    drain(req);
    sendText(res, restStatus(err), (err as Error).message);
  }
}

/** Reads and drops what is left of a refused request's body, so the connection stays usable. */
function drain(req: IncomingMessage): void {
  if (!req.readableEnded) req.resume();
}
