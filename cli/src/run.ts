/**
 * One run of the sandpit command: parses the command line, runs one command, returns its exit
 * code. Nothing but results goes to stdout; failures are one `sandpit: ...` line on stderr
 * (exit.ts).
 */
import { CommanderError } from "commander";
import { EXIT, oneLine, reportError } from "./exit.ts";
import { buildProgram } from "./program.ts";

export async function runCli(argv: string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return Number(process.exitCode ?? EXIT.OK);
  } catch (err) {
    if (err instanceof CommanderError) return commanderExit(err);
    return reportError(err);
  }
}

/** Help and --version exit 0; every other commander error is a usage error. */
function commanderExit(err: CommanderError): number {
  if (err.exitCode === 0) return EXIT.OK;
  // Help printed because a command was missing went to stderr already.
  if (err.code !== "commander.help" && err.code !== "commander.helpDisplayed") {
    let message = oneLine(err.message.replace(/^error: /, ""));
    if (err.code === "commander.unknownOption") message += " (put the sandbox's command after --)";
    process.stderr.write(`sandpit: ${message}\n`);
  }
  return EXIT.USAGE;
}
