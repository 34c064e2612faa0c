/**
 * Errors as E2B's API answers them: `{code: <http status>, message}`, with the status the E2B
 * SDKs map to their own classes (401 AuthenticationError, 404 NotFoundError on the sandbox
 * calls, 429 RateLimitError, 409 on pause "already paused", any other 4xx a SandboxError with
 * that status). The statuses themselves are the native API's (./../errors.ts), so both APIs
 * refuse the same things the same way; only the body differs.
 */
import { type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { NextFunction, Request, Response } from "express";
import { HTTP_STATUS } from "@sandpit/sandboxd/protocol";
import { ApiError, toApiError } from "../errors.ts";
import { SandboxUnavailable } from "../../sandboxes.ts";

interface Log {
  error: (o: object, m: string) => void;
}

export interface E2bErrorBody {
  code: number;
  message: string;
}

export interface E2bAnswer {
  status: number;
  body: E2bErrorBody;
  retryAfterS: number | undefined;
}

export const sandboxNotFound = (id: string) =>
  new ApiError("NOT_FOUND", `sandbox "${id}" not found`);

/** What any thrown value becomes on the wire. */
export function e2bAnswer(err: unknown): E2bAnswer {
  // The key's sandbox limit: retrying in a few seconds changes nothing until the caller kills
  // some, so no Retry-After (the SDKs would otherwise wait and retry before raising).
  if (err instanceof SandboxUnavailable && err.kind === "quota")
    return { status: 429, body: { code: 429, message: err.message }, retryAfterS: undefined };
  const e = toApiError(err);
  return {
    status: e.status,
    body: { code: e.status, message: e.message },
    retryAfterS: e.retryAfterS,
  };
}

/**
 * Whether `err` is this server's fault, worth an error log: its code's own status is a 5xx. A
 * 5xx E2B's protocol asks for on a caller's condition (its edge's 502 for a sandbox that is not
 * running) is not.
 */
export function serverFault(err: unknown): boolean {
  if (err instanceof SandboxUnavailable && err.kind === "quota") return false;
  return HTTP_STATUS[toApiError(err).code] >= 500;
}

/** Writes `err` on a response nothing was written to yet; one that has begun is cut off. */
export function writeE2bError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const a = e2bAnswer(err);
  res.writeHead(a.status, {
    "content-type": "application/json",
    ...(a.retryAfterS !== undefined ? { "retry-after": String(a.retryAfterS) } : {}),
  });
  res.end(JSON.stringify(a.body));
}

/** Answers a refused upgrade on its raw socket, in E2B's shape, and closes it. */
export function endSocketE2b(socket: Duplex, err: unknown): void {
  const a = e2bAnswer(err);
  const body = JSON.stringify(a.body);
  socket.end(
    `HTTP/1.1 ${a.status} ${STATUS_CODES[a.status] ?? ""}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `connection: close\r\n\r\n${body}`,
  );
}

/** The E2B routes' last express handler. */
export function e2bErrorHandler(log: Log) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const a = e2bAnswer(err);
    if (serverFault(err)) log.error({ err }, "E2B request failed");
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (a.retryAfterS !== undefined) res.setHeader("retry-after", String(a.retryAfterS));
    res.status(a.status).json(a.body);
  };
}
