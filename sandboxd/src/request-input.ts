/**
 * Reading a native request, shared by the routers: a body through its protocol schema (the first
 * problem as an INVALID_ARGUMENT naming the field), and whether the client asked for NDJSON.
 */
import type { IncomingMessage } from "node:http";
import type * as z from "zod";
import { SandboxdError } from "./wire.ts";
import { quickExecuteCode, quickInit, quickRunCommand } from "./quick-checks.ts";

export type RequestSchemas = typeof import("./request-schemas.ts");
/** The name of a request body's schema in ./request-schemas.ts. */
export type RequestSchema = keyof RequestSchemas;
export type Parsed<K extends RequestSchema> = z.infer<ReturnType<RequestSchemas[K]>>;

let schemas: Promise<RequestSchemas> | undefined;

/**
 * The request schemas (./request-schemas.ts, and zod with them), loaded by the first request
 * that has a body to check rather than at start; each schema is built on its first use.
 */
export function requestSchemas(): Promise<RequestSchemas> {
  return (schemas ??= import("./request-schemas.ts"));
}

/**
 * Hand-written checks for a warm claim's first bodies (./quick-checks.ts): what they accept needs
 * no zod; what they leave goes to the schema.
 */
const QUICK: { [K in RequestSchema]?: (body: unknown) => Parsed<K> | undefined } = {
  init: quickInit,
  runCommand: quickRunCommand,
  executeCode: quickExecuteCode,
};

/** `body` through the schema named `schema`. */
export async function parse<K extends RequestSchema>(schema: K, body: unknown): Promise<Parsed<K>> {
  const quick = (QUICK[schema] as ((body: unknown) => Parsed<K> | undefined) | undefined)?.(
    body ?? {},
  );
  if (quick !== undefined) return quick;
  return check((await requestSchemas())[schema](), body) as Parsed<K>;
}

/** `body` through a schema already at hand. */
export function check<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const result = schema.safeParse(body ?? {});
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
    throw new SandboxdError("INVALID_ARGUMENT", `${where}${issue?.message ?? "invalid request"}`);
  }
  return result.data;
}

export function wantsNdjson(req: IncomingMessage): boolean {
  return (req.headers.accept ?? "").includes("application/x-ndjson");
}
