/**
 * Errors as the API returns them: a status, a code from the SDK's SandboxError vocabulary and a
 * message a person can act on. Nothing the client sent ever produces a 5xx.
 */
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { NextFunction, Request, Response } from "express";
import { z } from "zod";
import { KubeApiError } from "@sandpit/operator/kube/client";
import { SandboxUnavailable } from "../sandboxes.ts";

export type ErrorCode =
  | "INVALID_ARGUMENT"
  | "UNAUTHORIZED"
  | "NOT_FOUND"
  | "CONFLICT"
  | "CAPACITY_EXCEEDED"
  | "RATE_LIMITED"
  | "PAYLOAD_TOO_LARGE"
  | "TIMEOUT"
  | "EXECUTION_FAILED"
  | "UPSTREAM_UNAVAILABLE"
  | "INTERNAL";

export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly retryAfterS: number | undefined;
  constructor(status: number, code: ErrorCode, message: string, retryAfterS?: number) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfterS = retryAfterS;
  }
}

/**
 * Answers `err` on a raw socket and closes it: an upgrade that is refused, or a request Node's
 * parser refused before express saw it. A HEAD's answer carries no body.
 */
export function endSocket(socket: Duplex, err: ApiError, withBody = true): void {
  const body = JSON.stringify({ error: { code: err.code, message: err.message } });
  socket.end(
    `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? ""}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      (err.retryAfterS !== undefined ? `retry-after: ${err.retryAfterS}\r\n` : "") +
      `connection: close\r\n\r\n${withBody ? body : ""}`,
  );
}

export const notFound = (id: string) => new ApiError(404, "NOT_FOUND", `no sandbox "${id}"`);

/** Parses `value` with `schema` or throws a 400 naming each bad field. */
export function parse<T extends z.ZodType>(schema: T, value: unknown, where: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => `${[where, ...i.path].join(".")}: ${i.message}`);
  throw new ApiError(400, "INVALID_ARGUMENT", lines.join("; "));
}

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof SandboxUnavailable) {
    if (err.kind === "capacity")
      return new ApiError(429, "CAPACITY_EXCEEDED", err.message, err.retryAfterS ?? 5);
    if (err.kind === "quota")
      return new ApiError(429, "RATE_LIMITED", err.message, err.retryAfterS ?? 30);
    if (err.kind === "timeout") return new ApiError(504, "TIMEOUT", err.message, err.retryAfterS);
    if (err.kind === "packages") return new ApiError(422, "EXECUTION_FAILED", err.message);
    return new ApiError(409, "CONFLICT", err.message);
  }
  const e = err as { type?: string; status?: number; message?: string };
  // body-parser's errors: bad JSON and oversized bodies are the client's.
  if (e.type === "entity.too.large")
    return new ApiError(413, "PAYLOAD_TOO_LARGE", "request body too large");
  if (e.type === "entity.parse.failed")
    return new ApiError(400, "INVALID_ARGUMENT", `malformed JSON: ${e.message}`);
  if (typeof e.status === "number" && e.status >= 400 && e.status < 500) {
    return new ApiError(e.status, "INVALID_ARGUMENT", e.message ?? "bad request");
  }
  if (err instanceof KubeApiError && err.status === 422)
    return new ApiError(400, "INVALID_ARGUMENT", err.message);
  if (err instanceof KubeApiError && err.status === 404)
    return new ApiError(404, "NOT_FOUND", err.message);
  return new ApiError(500, "INTERNAL", "internal error");
}

export function errorHandler(log: { error: (o: object, m: string) => void }) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = toApiError(err);
    if (e.status >= 500) log.error({ err }, "request failed");
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (e.retryAfterS !== undefined) res.setHeader("retry-after", String(e.retryAfterS));
    res.status(e.status).json({ error: { code: e.code, message: e.message } });
  };
}
