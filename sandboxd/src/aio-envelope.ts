/**
 * AIO's response envelope: `{success, message, data}` on success, and the same shape with
 * `success: false` (plus sandboxd's own `error` object) with an error status on every failure of
 * an AIO route, whatever produced it: validation, the token check, a body too large, an unknown
 * route under an AIO prefix.
 */
import type * as z from "zod";
import { sendJson, type Req, type Res } from "./http.ts";
import { SandboxdError, type ErrorBody } from "./wire.ts";

/** Reads a request's JSON body (bounded; see http.ts). */
export type JsonReader = (req: Req) => Promise<unknown>;

/** The longest wait or timeout, in seconds, an AIO shell or bash call takes. */
export const MAX_SECONDS = 24 * 3600;

type AioSchemas = typeof import("./aio-schemas.ts");
/** The name of an AIO request body's schema in ./aio-schemas.ts. */
export type AioSchema = keyof AioSchemas;
type Parsed<K extends AioSchema> = z.infer<ReturnType<AioSchemas[K]>>;

let schemas: Promise<AioSchemas> | undefined;

export function ok(res: Res, data: unknown, message = "ok"): void {
  sendJson(res, { success: true, message, data });
}

export function sendAioError(res: Res, status: number, error: ErrorBody): void {
  sendJson(res, { success: false, message: error.message, data: null, error }, status);
}

/** A request's JSON body through the schema named `schema`. */
export async function body<K extends AioSchema>(
  schema: K,
  req: Req,
  json: JsonReader,
): Promise<Parsed<K>> {
  return parse(schema, await json(req));
}

/**
 * Validates a request's fields by the schema named `schema`, with the first problem as the
 * message. The schemas (and zod) are loaded by the first call, each built on its first use.
 */
export async function parse<K extends AioSchema>(schema: K, value: unknown): Promise<Parsed<K>> {
  const s = (await (schemas ??= import("./aio-schemas.ts")))[schema]();
  return checkFields(s as z.ZodType, value) as Parsed<K>;
}

/** `value` through a schema at hand, with the first problem as the message (`body: ...` for the whole). */
export function checkFields<T extends z.ZodType>(schema: T, value: unknown): z.infer<T> {
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
