/**
 * The two sandboxd calls the operator makes on a pod's own address: the health probe that
 * decides Ready (faster than waiting a kubelet probe period) and reports how long the sandbox
 * has been idle, and /v1/init, which hands a warm pod its new owner's token, environment and
 * packages without restarting anything.
 */
import { type HealthResponse, type InitRequest, SANDBOXD_PORT } from "@sandpit/sandboxd/protocol";
import { get } from "node:http";
import { request } from "undici";
import type { z } from "zod";

/**
 * sandboxd's /healthz answer, or undefined when it does not answer in time (`timeoutMs` of
 * silence, connecting included). A plain request on a socket of its own: a shared agent keeps a
 * connection pool per address, which for a probe of thousands of pod addresses is thousands of
 * pools made and dropped, and measured 2-3x the time and the memory of this.
 */
export function health(ip: string, timeoutMs = 1_000): Promise<HealthResponse | undefined> {
  return new Promise((resolve) => {
    const req = get(
      { host: ip, port: SANDBOXD_PORT, path: "/healthz", agent: false, timeout: timeoutMs },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          return resolve(undefined);
        }
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => {
          try {
            resolve(JSON.parse(body) as HealthResponse);
          } catch {
            resolve(undefined);
          }
        });
        res.on("error", () => resolve(undefined));
      },
    );
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(undefined));
  });
}

/**
 * The longest a /v1/init may take (it installs packages). A reconcile that calls it is given at
 * least this long before its signal aborts it.
 */
export const INIT_TIMEOUT_MS = 600_000;

/**
 * Initialises sandboxd, authenticating with the first of `tokens` it accepts (the warm pod's
 * token the first time, the sandbox's own when a previous attempt already switched it).
 * `signal` is the reconcile's: a reconcile that has run too long stops waiting here.
 */
export async function init(
  ip: string,
  tokens: string[],
  body: z.input<typeof InitRequest>,
  signal: AbortSignal,
): Promise<void> {
  let last = "";
  for (const token of tokens) {
    const res = await request(`http://${ip}:${SANDBOXD_PORT}/v1/init`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      headersTimeout: INIT_TIMEOUT_MS,
      bodyTimeout: INIT_TIMEOUT_MS,
      signal,
    });
    const text = await res.body.text();
    if (res.statusCode === 200) return;
    last = `HTTP ${res.statusCode}: ${text.slice(0, 500)}`;
    if (res.statusCode !== 401) {
      if ((res.statusCode >= 400 && res.statusCode < 500) || res.statusCode === 500) {
        let message = text.slice(0, 2000);
        try {
          message =
            (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? message;
        } catch {
          // keep the text
        }
        throw new InitRejected(`sandboxd could not initialise the sandbox: ${message}`);
      }
      break;
    }
  }
  throw new Error(`sandboxd /v1/init failed: ${last}`);
}

/** sandboxd answered and said no (a package that does not install, say): not worth retrying. */
export class InitRejected extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InitRejected";
  }
}
