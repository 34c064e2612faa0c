/**
 * Placeholder of the E2B data plane (envd and the code interpreter) until its own module lands:
 * the exports the dispatcher uses, with every request answered 501 in E2B's error shape.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { SandboxInstance } from "@sandpit/sdk";

export const ENVD_PORT = 49983;
export const INTERPRETER_PORT = 49999;
export const ENVD_VERSION = "0.4.0";

export interface EnvdTarget {
  sandboxId: string;
  instance: SandboxInstance;
  accessToken: string;
  envdVersion: string;
}

/** Serves one data-plane request for port 49983 (envd) or 49999 (code interpreter). */
export async function serveEnvd(
  req: IncomingMessage,
  res: ServerResponse,
  _path: string,
  _port: number,
  _target: EnvdTarget,
): Promise<void> {
  req.resume();
  res.writeHead(501, { "content-type": "application/json" });
  res.end(JSON.stringify({ code: 501, message: "data plane not available yet" }));
}

/** Whether a signed /files URL's signature was made with this sandbox's token. */
export function filesSignatureValid(_path: string, _accessToken: string): boolean {
  return false;
}
