/** Validates options against a zod schema; the first problem becomes INVALID_ARGUMENT naming the field. */
import type { z } from "zod";
import { SandboxError } from "./errors.ts";

export function parseOptions<S extends z.ZodType>(
  schema: S,
  input: unknown,
  what: string,
): z.output<S> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  const i = parsed.error.issues[0];
  const where = i?.path.length ? `${i.path.join(".")}: ` : "";
  throw new SandboxError(
    `invalid ${what}: ${where}${i?.message ?? "invalid value"}`,
    "INVALID_ARGUMENT",
  );
}
