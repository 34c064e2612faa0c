// Loaded with --import before a TypeScript code cell. An uncaught exception or unhandled
// rejection is written to the error file as JSON {name, message, traceback}, printed to stderr
// as Node would, and the process exits 1. Stack frames name the cell "<code>", never a host path.
import { writeFileSync } from "node:fs";

const errorFile = process.env.SANDPIT_ERROR_FILE;
const codeFile = process.env.SANDPIT_CODE_FILE;
delete process.env.SANDPIT_ERROR_FILE;
delete process.env.SANDPIT_CODE_FILE;

function clean(text) {
  if (!codeFile) return text;
  return text.split(`file://${codeFile}`).join("<code>").split(codeFile).join("<code>");
}

function report(err) {
  const isError = err instanceof Error;
  const name = isError ? err.name : typeof err;
  const message = isError ? err.message : String(err);
  const traceback = clean(isError && err.stack ? err.stack : `${name}: ${message}`);
  process.stderr.write(traceback + "\n");
  if (errorFile) {
    try {
      writeFileSync(errorFile, JSON.stringify({ name, message: clean(message), traceback }));
    } catch {
      // the error is still on stderr
    }
  }
  process.exitCode = 1;
  process.exit(1);
}

process.on("uncaughtException", report);
process.on("unhandledRejection", report);
