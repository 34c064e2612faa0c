/**
 * AIO's response envelope: `{success, message, data}` on success, and the same shape with
 * `success: false` (plus sandboxd's own `error` object) with an error status on every failure of
 * an AIO route, whatever produced it: validation, the token check, a body too large, an unknown
 * route under an AIO prefix.
 */
import type * as z from "zod";
import { sendJson, type Req, type Res } from "./http.ts";
import { SandboxdError, type ErrorBody } from "./protocol.ts";

/** Reads a request's JSON body (bounded; see http.ts). */
export type JsonReader = (req: Req) => Promise<unknown>;

export function ok(res: Res, data: unknown, message = "ok"): void {
  sendJson(res, { success: true, message, data });
}

export function sendAioError(res: Res, status: number, error: ErrorBody): void {
  sendJson(res, { success: false, message: error.message, data: null, error }, status);
}

/** A request's JSON body through `schema`. */
export async function body<T extends z.ZodType>(
  schema: T,
  req: Req,
  json: JsonReader,
): Promise<z.infer<T>> {
  return parse(schema, await json(req));
}

/** Validates a request's fields, with the first problem as the message. */
export function parse<T extends z.ZodType>(schema: T, value: unknown): z.infer<T> {
  const r = schema.safeParse(value ?? {});
  if (!r.success) {
    const i = r.error.issues[0];
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      `${i?.path.join(".") || "body"}: ${i?.message ?? "invalid"}`,
    );
  }
  return r.data;
}

/** AIO truncates long output in the middle, keeping both ends. */
export function truncateMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n... [${text.length - max} characters truncated] ...\n${text.slice(-half)}`;
}
