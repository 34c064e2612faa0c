// A persistent TypeScript interpreter for one sandboxd code context (run with --expose-internals
// for Node's own REPL transforms). Cells arrive as JSON lines on fd 3 and run one after another as
// scripts in this process's global scope, so `const`, `let`, functions and classes of one cell are
// there in the next; events go back as JSON lines on fd 4 (`result`, `error`, `done`). A cell's
// console output goes to fds 1 and 2, which sandboxd streams; before `done` the cell's random end
// mark is written to both, so sandboxd knows it has all of the cell's output.
//
// A cell: TypeScript types are stripped (enums and namespaces transformed); static imports become
// dynamic ones (`import x from "m"` -> `const x = (await __sandpit_import("m")).default`), bare
// names resolved from the working directory, then from the cells' directory, relative specifiers
// taken from the working directory; top-level await is rewritten as the Node REPL does, with the
// cell's declarations kept global. If the last statement is an expression, its value is the main
// result. SIGINT interrupts the cell: synchronous code is broken off (breakOnSigint); a cell
// waiting on a promise stops being waited for (what it started may still run).
import { createReadStream, writeSync } from "node:fs";
import { createRequire, stripTypeScriptTypes } from "node:module";
import { isAbsolute, resolve } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { inspect } from "node:util";
import vm from "node:vm";

const REQUESTS = 3;
const EVENTS = 4;
const require = createRequire(import.meta.url);
const { processTopLevelAwait } = require("internal/repl/await");
const acorn = require("internal/deps/acorn/acorn/dist/acorn");

// Cells are named as files here, so bare imports find packages installed for the sandbox.
const cellDir = process.env.SANDPIT_CELL_DIR ?? process.cwd();
delete process.env.SANDPIT_CELL_DIR;
const kernelFile = new URL(import.meta.url).pathname;

function send(event) {
  writeSync(EVENTS, JSON.stringify(event) + "\n");
}

class Interrupted extends Error {
  constructor() {
    super("the cell was interrupted");
    this.name = "Interrupted";
  }
}

let interruptWait = null;
process.on("SIGINT", () => interruptWait?.(new Interrupted()));
// An uncaught exception or unhandled rejection while a cell runs is that cell's error (the first
// one), as in a one-shot run; work a cell left behind that fails later, outside any cell, is said
// on stderr, and the context is kept either way.
let cellFailures = null;
const uncaught = (err) => {
  if (cellFailures) cellFailures.push(err);
  else process.stderr.write(`Uncaught ${err instanceof Error ? err.stack : inspect(err)}\n`);
};
process.on("uncaughtException", uncaught);
process.on("unhandledRejection", uncaught);

globalThis.require = createRequire(resolve(process.cwd(), "cell.js"));
globalThis.display = (...values) => {
  for (const v of values) send({ type: "result", result: { isMainResult: false, ...bundle(v) } });
};

function bundle(value) {
  const out = { text: inspect(value, { depth: 4 }) };
  const proto = value !== null && typeof value === "object" ? Object.getPrototypeOf(value) : 0;
  if (Array.isArray(value) || proto === Object.prototype || proto === null) {
    try {
      out.json = JSON.parse(JSON.stringify(value));
    } catch {
      // cyclic or not JSON (a BigInt): the text form stays
    }
  }
  return out;
}

function stripTypes(code) {
  try {
    return stripTypeScriptTypes(code, { mode: "strip" }); // keeps every line where it was
  } catch {
    return stripTypeScriptTypes(code, { mode: "transform" }); // enums, namespaces
  }
}

const specifierOf = (s) =>
  s.startsWith("./") || s.startsWith("../") || isAbsolute(s)
    ? pathToFileURL(resolve(process.cwd(), s)).href
    : s;

/** `import(specifier)` as a module in `dir` would do it (Node's resolution from there). */
const importers = new Map();
function importerIn(dir) {
  const filename = resolve(dir, "[sandpit-import].js");
  if (!importers.has(filename)) {
    const load = new vm.Script("(specifier) => import(specifier)", {
      filename,
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    }).runInThisContext();
    importers.set(filename, { filename, load });
  }
  return importers.get(filename);
}

/**
 * A cell's static import. A bare name is looked for from the working directory first (up its
 * node_modules, as Node does: what `npm install` put in the project or the home directory), then
 * from the cells' directory (the packages installed for the sandbox).
 */
globalThis.__sandpit_import = async (specifier) => {
  const resolved = specifierOf(specifier);
  if (resolved !== specifier || specifier.startsWith("node:")) return import(resolved);
  const local = importerIn(process.cwd());
  try {
    return await local.load(specifier);
  } catch (err) {
    // Only the package itself missing there, not something it imports.
    const missing =
      err?.code === "ERR_MODULE_NOT_FOUND" && String(err.message).includes(local.filename);
    if (!missing) throw err;
  }
  return importerIn(cellDir).load(specifier);
};

/** Static imports as dynamic ones; whether the last statement is an expression. */
function rewrite(js, number) {
  let tree;
  try {
    tree = acorn.parse(js, {
      ecmaVersion: "latest",
      sourceType: "module",
      allowAwaitOutsideFunction: true,
    });
  } catch {
    return { js, lastIsExpression: false }; // V8 reports the syntax error
  }
  const edits = [];
  for (const node of tree.body) {
    if (node.type !== "ImportDeclaration") continue;
    const from = `await __sandpit_import(${JSON.stringify(node.source.value)})`;
    const names = [];
    let ns = null;
    let def = null;
    for (const s of node.specifiers) {
      if (s.type === "ImportNamespaceSpecifier") ns = s.local.name;
      else if (s.type === "ImportDefaultSpecifier") def = s.local.name;
      else {
        const imported =
          s.imported.type === "Literal" ? JSON.stringify(s.imported.value) : s.imported.name;
        names.push(imported === s.local.name ? imported : `${imported}: ${s.local.name}`);
      }
    }
    const parts = [];
    if (!ns && !def && names.length === 0) parts.push(`${from};`);
    else {
      // Named for the cell too: cells share one global scope.
      const m = `__sandpit_import_${number}_${node.start}`;
      parts.push(`const ${ns ?? m} = ${from};`);
      if (def) parts.push(`const ${def} = ${ns ?? m}.default;`);
      if (names.length) parts.push(`const { ${names.join(", ")} } = ${ns ?? m};`);
    }
    edits.push([node.start, node.end, parts.join(" ")]);
  }
  for (const [start, end, text] of edits.reverse()) js = js.slice(0, start) + text + js.slice(end);
  return { js, lastIsExpression: tree.body.at(-1)?.type === "ExpressionStatement" };
}

function clean(text, filename, number) {
  const lines = String(text).split(filename).join(`<cell ${number}>`).split("\n");
  const own = lines.findIndex((l) => l.includes(kernelFile) || l.includes("node:vm"));
  return (own > 0 ? lines.slice(0, own) : lines).join("\n");
}

async function runCell(number, code) {
  const filename = resolve(cellDir, `cell-${number}.ts`);
  const stripped = stripTypes(code);
  const { js, lastIsExpression } = rewrite(stripped, number);
  const awaited = processTopLevelAwait(js);
  const script = new vm.Script(awaited ?? js, {
    filename,
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  if (awaited !== null) {
    value = await new Promise((done, fail) => {
      interruptWait = fail;
      value.then(done, fail);
    }).finally(() => (interruptWait = null));
    value = value?.value;
  }
  if (lastIsExpression && value !== undefined) {
    send({ type: "result", result: { isMainResult: true, ...bundle(value) } });
  }
}

function errorEvent(err, number) {
  const filename = resolve(cellDir, `cell-${number}.ts`);
  if (err?.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") err = new Interrupted();
  const isError = err instanceof Error;
  const name = isError ? err.name : typeof err;
  const value = isError ? err.message : inspect(err);
  const traceback = clean(isError && err.stack ? err.stack : `${name}: ${value}`, filename, number);
  return { type: "error", error: { name, value: clean(value, filename, number), traceback } };
}

let number = 0;
const lines = createInterface({ input: createReadStream("", { fd: REQUESTS }) });
send({ type: "ready" });
for await (const line of lines) {
  const request = JSON.parse(line);
  number++;
  const env = request.env ?? {};
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  cellFailures = [];
  try {
    await runCell(number, request.code);
    // Rejections the cell left unhandled are reported once its microtasks have run.
    await new Promise((done) => setImmediate(done));
    if (cellFailures.length > 0) send(errorEvent(cellFailures[0], number));
  } catch (err) {
    send(errorEvent(err, number));
  } finally {
    cellFailures = null;
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    writeSync(1, request.mark);
    writeSync(2, request.mark);
    send({ type: "done" });
  }
}
