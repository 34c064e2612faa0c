/**
 * What every command module uses: the global options (`--json`, `--config`) as the command sees
 * them, and `action()`, which runs a command's body and turns its result into the exit code.
 */
import type { Command } from "commander";
import type { GlobalOptions } from "./provider.ts";

export type { GlobalOptions };

/** The options of `cmd` merged with the program's (`--json`, `--config`). */
export function optionsOf<T>(cmd: Command): T & GlobalOptions {
  return cmd.optsWithGlobals<T & GlobalOptions>();
}

/**
 * A command body returns its exit code (undefined: 0). Commander passes the declared arguments,
 * then the options, then the command itself; bodies get the arguments and the merged options.
 */
export function action<A extends unknown[], O>(
  body: (args: A, opts: O & GlobalOptions) => Promise<number | void>,
) {
  return async (...all: unknown[]) => {
    const cmd = all[all.length - 1] as Command;
    const args = all.slice(0, -2) as A;
    const code = await body(args, optionsOf<O>(cmd));
    process.exitCode = code ?? 0;
  };
}
