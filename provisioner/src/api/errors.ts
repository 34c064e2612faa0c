/**
 * Errors as the API returns them: a status, a code from the vocabulary sandboxd, the provisioner
 * and the SDK share (`@sandpit/sandboxd/protocol`) and a message a person can act on. Nothing the
 * client sent ever produces a 5xx.
 *
 * Every error answer carries one envelope, `{error: {code, message}}` (the DeerFlow routes answer
 * it too), whichever way it leaves: an express response, a proxied request that could not reach
 * its sandbox, or a raw socket (a refused upgrade, a request Node's parser refused).
 */
import { type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { NextFunction, Request, Response } from "express";
import { z } from "zod";
import { KubeApiError } from "@sandpit/operator/kube/client";
import { type ErrorBody, type ErrorCode, HTTP_STATUS } from "@sandpit/sandboxd/protocol";
import { CreateRefused } from "../limits.ts";
import { SandboxUnavailable } from "../sandboxes.ts";

interface Log {
  error: (o: object, m: string) => void;
}

export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly retryAfterS: number | undefined;
  /** `status` is the code's own (HTTP_STATUS) unless the answer needs a more precise one. */
  constructor(
    code: ErrorCode,
    message: string,
    options: { status?: number; retryAfterS?: number | undefined } = {},
  ) {
    super(message);
    this.code = code;
    this.status = options.status ?? HTTP_STATUS[code];
    this.retryAfterS = options.retryAfterS;
  }
}

/** The body of every error answer. */
export function errorEnvelope(err: ApiError): { error: ErrorBody } {
  return { error: { code: err.code, message: err.message } };
}

/**
 * Answers `err` on a response nothing has been written to yet, outside express (the proxy's own
 * answer when the sandbox cannot be reached); one that has begun is cut off instead.
 */
export function writeError(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(err.status, { "content-type": "application/json" });
  res.end(JSON.stringify(errorEnvelope(err)));
}

/**
 * Answers `err` on a raw socket and closes it: an upgrade that is refused, or a request Node's
 * parser refused before express saw it. A HEAD's answer carries no body.
 */
export function endSocket(socket: Duplex, err: ApiError, withBody = true): void {
  const body = JSON.stringify(errorEnvelope(err));
  socket.end(
    `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? ""}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      (err.retryAfterS !== undefined ? `retry-after: ${err.retryAfterS}\r\n` : "") +
      `connection: close\r\n\r\n${withBody ? body : ""}`,
  );
}

export const notFound = (id: string) => new ApiError("NOT_FOUND", `no sandbox "${id}"`);

/** Parses `value` with `schema` or throws a 400 naming each bad field. */
export function parse<T extends z.ZodType>(schema: T, value: unknown, where: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => `${[where, ...i.path].join(".")}: ${i.message}`);
  throw new ApiError("INVALID_ARGUMENT", lines.join("; "));
}

/**
 * The API server's refusals in our own words: its messages name resource paths and fields of
 * objects the client never sees, so none of its text is passed on.
 */
export function fromKube(err: KubeApiError): ApiError {
  switch (err.status) {
    case 400:
    case 422:
      return new ApiError("INVALID_ARGUMENT", "the sandbox's settings were refused by the cluster");
    case 404:
      return new ApiError("NOT_FOUND", "the sandbox no longer exists");
    case 409:
      return new ApiError("CONFLICT", "the sandbox changed meanwhile; try again", {
        retryAfterS: 1,
      });
    case 429:
      return new ApiError("RATE_LIMITED", "the cluster is busy; try again shortly", {
        retryAfterS: 5,
      });
    default:
      return new ApiError("INTERNAL", "internal error");
  }
}

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof KubeApiError) return fromKube(err);
  if (err instanceof CreateRefused) return new ApiError(err.code, err.message);
  if (err instanceof SandboxUnavailable) {
    if (err.kind === "capacity")
      return new ApiError("CAPACITY_EXCEEDED", err.message, { retryAfterS: err.retryAfterS ?? 5 });
    if (err.kind === "quota")
      return new ApiError("RATE_LIMITED", err.message, { retryAfterS: err.retryAfterS ?? 30 });
    if (err.kind === "timeout")
      return new ApiError("TIMEOUT", err.message, { retryAfterS: err.retryAfterS });
    if (err.kind === "packages") return new ApiError("EXECUTION_FAILED", err.message);
    return new ApiError("CONFLICT", err.message);
  }
  const e = err as { type?: string; status?: number; message?: string };
  // body-parser's errors: bad JSON and oversized bodies are the client's.
  if (e.type === "entity.too.large")
    return new ApiError("PAYLOAD_TOO_LARGE", "request body too large");
  if (e.type === "entity.parse.failed")
    return new ApiError("INVALID_ARGUMENT", `malformed JSON: ${e.message}`);
  if (typeof e.status === "number" && e.status >= 400 && e.status < 500) {
    return new ApiError("INVALID_ARGUMENT", e.message ?? "bad request", { status: e.status });
  }
  return new ApiError("INTERNAL", "internal error");
}

/** express's last handler: every error a route throws, answered in the envelope. */
export function errorHandler(log: Log) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = toApiError(err);
    if (e.status >= 500) log.error({ err }, "request failed");
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (e.retryAfterS !== undefined) res.setHeader("retry-after", String(e.retryAfterS));
    res.status(e.status).json(errorEnvelope(e));
  };
}

/** What errorHandler is to a request, for an upgrade that failed: answered on its socket. */
export function upgradeErrorHandler(log: Log) {
  return (err: unknown, socket: Duplex) => {
    const e = toApiError(err);
    if (e.status >= 500) log.error({ err }, "upgrade failed");
    endSocket(socket, e);
  };
}

/**
 * The server's `clientError` listener: what Node's parser refuses before express sees it
 * (headers too large, malformed requests) gets the same JSON error as everything else.
 */
export function clientErrorHandler(
  err: NodeJS.ErrnoException & { rawPacket?: Buffer },
  socket: Duplex,
): void {
  if (err.code === "ECONNRESET" || !socket.writable) {
    socket.destroy();
    return;
  }
  const e =
    err.code === "HPE_HEADER_OVERFLOW"
      ? new ApiError("PAYLOAD_TOO_LARGE", "request line and headers are too large", {
          status: 431,
        })
      : new ApiError("INVALID_ARGUMENT", `malformed HTTP request (${err.code ?? err.message})`, {
          status: err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400,
        });
  endSocket(socket, e, err.rawPacket?.toString("latin1", 0, 5) !== "HEAD ");
}
