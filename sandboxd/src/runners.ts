/**
 * The code-cell runners (sandboxd/runners/): the Python runner runs a cell and writes its error
 * as JSON, the Node preload does the same for TypeScript. sandboxd runs them from here; the
 * Daytona provider uploads them into its sandboxes, so a cell behaves the same on both.
 */
import { fileURLToPath } from "node:url";

/** Static files, read-only inside the sandbox. */
export const RUNNERS_DIR = fileURLToPath(new URL("../runners/", import.meta.url)).replace(
  /\/$/,
  "",
);

/** The runner file of each language, in RUNNERS_DIR. */
export const RUNNERS = { python: "python_runner.py", typescript: "node_preload.mjs" } as const;

/** The persistent interpreter of each language, for code contexts (contexts.ts), in RUNNERS_DIR. */
export const KERNELS = { python: "python_kernel.py", typescript: "node_kernel.mjs" } as const;
