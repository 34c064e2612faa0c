/**
 * Reading a native request, shared by the routers: a body through its protocol schema (the first
 * problem as an INVALID_ARGUMENT naming the field), and whether the client asked for NDJSON.
 */
import type { IncomingMessage } from "node:http";
import type * as z from "zod";
import { SandboxdError } from "./protocol.ts";

export function parse<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
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
