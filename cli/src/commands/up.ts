/**
 * `sandpit up`: the whole local Sandpit (a Kubernetes cluster with the operator and provisioner),
 * which is built from a checkout of the Sandpit repository: inside one, this runs its `up`
 * script (what `npm run up` runs) with the arguments given; outside, it says what to do instead.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import { action } from "../command-kit.ts";
import { CliError, EXIT } from "../exit.ts";

export function register(program: Command): void {
  program
    .command("up")
    .description("start the whole local Sandpit (run inside a checkout of the Sandpit repository)")
    .argument("[args...]", "passed to the repository's up script (after --)")
    .action(
      action<[string[]], object>(async ([args]) => {
        const found = findCheckout(process.cwd());
        if (!found) {
          throw new CliError(
            "sandpit up runs from a checkout of the Sandpit repository (it builds a local Kubernetes cluster): clone the repository and run it inside; for the same APIs on this machine without Kubernetes, run `sandpit serve`",
          );
        }
        const child = spawn("sh", ["-c", `${found.script} "$@"`, "sandpit-up", ...args], {
          cwd: found.root,
          stdio: "inherit",
        });
        // Ctrl-C reaches the script through the terminal; this process waits for it to finish.
        const ignore = () => undefined;
        process.on("SIGINT", ignore);
        try {
          return await new Promise<number>((resolve, reject) => {
            child.once("error", (err) =>
              reject(new CliError(`cannot run the up script: ${err.message}`)),
            );
            child.once("exit", (code, signal) =>
              resolve(code ?? (signal === "SIGINT" ? EXIT.INTERRUPTED : EXIT.RUNTIME)),
            );
          });
        } finally {
          process.off("SIGINT", ignore);
        }
      }),
    );
}

/** The Sandpit checkout containing `dir`: the root package.json named `sandpit` with an up script. */
export function findCheckout(dir: string): { root: string; script: string } | undefined {
  for (let d = resolve(dir); ; d = dirname(d)) {
    const pkgPath = join(d, "package.json");
    if (existsSync(pkgPath)) {
      try {
        const pkg = JSON.parse(readFileSync(pkgPath, "utf8")) as {
          name?: string;
          scripts?: Record<string, string>;
        };
        if (pkg.name === "sandpit" && pkg.scripts?.up) return { root: d, script: pkg.scripts.up };
      } catch {
        // An unreadable package.json is not a checkout; keep looking upwards.
      }
    }
    if (dirname(d) === d) return undefined;
  }
}
