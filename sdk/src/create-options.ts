/** Checks SandboxCreateOptions once, for every provider, before anything is created. */
import { ID_PATTERN, ID_RULE, LANGUAGES, PackageSpecs } from "@sandpit/sandboxd/protocol";
import { z } from "zod";
import { parseOptions } from "./parse-options.ts";
import type { SandboxCreateOptions } from "./types.ts";

const CreateOptions = z.object({
  language: z.enum(LANGUAGES, {
    error: (i) => `unknown language ${JSON.stringify(i.input)}: use "python" or "typescript"`,
  }),
  packages: PackageSpecs.optional(),
  envs: z.record(z.string(), z.string()).optional(),
  workingDirectory: z.string().min(1).optional(),
  timeoutMs: z.number().int().positive().optional(),
  // User and thread IDs end up in names and paths, so they are kept to a safe alphabet.
  threadId: z.string().regex(ID_PATTERN, `threadId must be ${ID_RULE}`).optional(),
  userId: z.string().regex(ID_PATTERN, `userId must be ${ID_RULE}`).optional(),
});

/** Create options are checked before anything touches the disk. */
export function validateCreate(options: SandboxCreateOptions): SandboxCreateOptions {
  return parseOptions(CreateOptions, options, "create options");
}
