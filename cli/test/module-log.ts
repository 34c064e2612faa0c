/**
 * Loaded with `--import` into a CLI run by the fast-exec tests: at exit, writes the URL of every
 * module the run loaded to $SANDPIT_MODULE_LOG, one a line.
 */
import { writeFileSync } from "node:fs";
import { registerHooks } from "node:module";

const loaded: string[] = [];
registerHooks({
  load(url, context, next) {
    loaded.push(url);
    return next(url, context);
  },
});
process.on("exit", () => writeFileSync(process.env.SANDPIT_MODULE_LOG!, loaded.join("\n")));
