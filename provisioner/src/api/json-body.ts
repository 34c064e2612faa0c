/**
 * The one body parser of every JSON route (native, DeerFlow, E2B): a body that is not JSON is
 * refused with 415, never read as "no body" (which used to give a default sandbox, no thread and
 * `wait` ignored, so every retry of a form-encoded create leaked a sandbox). A request without a
 * body is fine: routes whose fields are all optional take it as `{}`.
 */
import type { IncomingMessage } from "node:http";
import { json, type NextFunction, type Request, type RequestHandler, type Response } from "express";
import { ApiError } from "./errors.ts";

/** Whether the request carries bytes (a `content-length: 0` body is no body). */
function hasBody(req: IncomingMessage): boolean {
  if (req.headers["transfer-encoding"] !== undefined) return true;
  const length = Number(req.headers["content-length"] ?? 0);
  return Number.isFinite(length) && length > 0;
}

const JSON_TYPES = ["application/json", "application/*+json"];

export function jsonBody(limit: number): RequestHandler {
  const parse = json({ limit, type: JSON_TYPES });
  return (req: Request, res: Response, next: NextFunction) => {
    if (hasBody(req) && !req.is(JSON_TYPES)) {
      const type = req.headers["content-type"] ?? "none";
      next(
        new ApiError("INVALID_ARGUMENT", `the body must be application/json, got ${type}`, {
          status: 415,
        }),
      );
      return;
    }
    parse(req, res, next);
  };
}
