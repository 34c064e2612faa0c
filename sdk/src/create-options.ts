/** Checks SandboxCreateOptions once, for every provider, before anything is created. */
import { LANGUAGES } from "@sandpit/sandboxd/protocol";
import { z } from "zod";
import { parseOptions } from "./parse-options.ts";
import type { SandboxCreateOptions } from "./types.ts";

/** User and thread IDs end up in names and paths, so they are kept to a safe alphabet. */
export const ID = /^[A-Za-z0-9_-]{1,64}$/;

const CreateOptions = z.object({
  language: z.enum(LANGUAGES, {
    error: (i) => `unknown language ${JSON.stringify(i.input)}: use "python" or "typescript"`,
  }),
  packages: z.array(z.string().min(1)).optional(),
  envs: z.record(z.string(), z.string()).optional(),
  workingDirectory: z.string().min(1).optional(),
  timeoutMs: z.number().int().positive().optional(),
  threadId: z.string().regex(ID, "threadId must be 1-64 characters of [A-Za-z0-9_-]").optional(),
  userId: z.string().regex(ID, "userId must be 1-64 characters of [A-Za-z0-9_-]").optional(),
});

/** Create options are checked before anything touches the disk. */
export function validateCreate(options: SandboxCreateOptions): SandboxCreateOptions {
  return parseOptions(CreateOptions, options, "create options");
}
