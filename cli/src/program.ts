/**
 * The sandpit command tree. Program-wide options (`--json`, `--config`) are accepted before or
 * after the command name; commander's own errors are thrown (exitOverride) so main() prints them
 * as the CLI's one line with the usage exit code.
 */
import { Command } from "commander";
import * as completion from "./commands/completion.ts";
import * as cp from "./commands/cp.ts";
import * as create from "./commands/create.ts";
import * as exec from "./commands/exec.ts";
import * as info from "./commands/info.ts";
import * as lifecycle from "./commands/lifecycle.ts";
import * as ls from "./commands/ls.ts";
import * as mcp from "./commands/mcp.ts";
import * as port from "./commands/port.ts";
import * as processes from "./commands/processes.ts";
import * as serve from "./commands/serve.ts";
import * as shell from "./commands/shell.ts";
import * as up from "./commands/up.ts";
import { VERSION } from "./version.ts";

const COMMANDS = [
  create,
  ls,
  info,
  exec,
  shell,
  cp,
  processes,
  port,
  lifecycle,
  up,
  serve,
  mcp,
  completion,
];

export function buildProgram(): Command {
  const program = new Command("sandpit")
    .description("Sandpit sandboxes from a shell, and an MCP server over stdio.")
    .version(VERSION, "-V, --version")
    .option("--json", "machine-readable output on stdout")
    .option("-c, --config <file>", "Sandpit config file (default: $SANDPIT_CONFIG, ./sandpit.yaml)")
    .configureHelp({ showGlobalOptions: true, sortSubcommands: false })
    .addHelpText(
      "after",
      "\nEnvironment: SANDPIT_CONFIG, SANDPIT_PROVIDER (e.g. docker, or local), SANDPIT_DEBUG=1 (stack traces),\nSANDPIT_LOG_LEVEL. Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted; exec, shell and\nlogs -f exit with the command's own code. See cli/README.md.",
    )
    .exitOverride()
    .configureOutput({ outputError: () => undefined });
  for (const c of COMMANDS) c.register(program);
  return program;
}
