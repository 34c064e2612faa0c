/**
 * Loaded with `--import` into a CLI run by the fast-exec tests: at exit, writes the URL of every
 * module the run loaded to $SANDPIT_MODULE_LOG, one a line, then Node's built-in modules it
 * loaded after start-up as `builtin:<id>` (from `process.moduleLoadList`, which also sees those
 * taken with `process.getBuiltinModule`, where no loader hook is called).
 */
import { writeFileSync } from "node:fs";
import { registerHooks } from "node:module";

const loaded: string[] = [];
const atStart = new Set(builtins());

function builtins(): string[] {
  const list = (process as unknown as { moduleLoadList: string[] }).moduleLoadList;
  return list.filter((m) => m.startsWith("NativeModule ")).map((m) => m.slice(13));
}
registerHooks({
  load(url, context, next) {
    loaded.push(url);
    return next(url, context);
  },
});
process.on("exit", () => {
  const more = builtins().filter((b) => !atStart.has(b));
  writeFileSync(
    process.env.SANDPIT_MODULE_LOG!,
    [...loaded, ...more.map((b) => `builtin:${b}`)].join("\n"),
  );
});
