/**
 * `sandpit exec <id> [--] <command...>` without the rest of the CLI: when the command line is a
 * plain exec (no flags but `--json` and `--config`) and the sandbox has an exec ticket
 * (./exec-ticket.ts), the command runs over the ticket's sandboxd connection with the SDK's own
 * sandboxd instance and client, and the same output and exit code as the full path
 * (./exec-run.ts). Loaded here: a few CLI modules, the SDK's sandboxd client and instance; not
 * commander, the config parser, the provider registry or any provider.
 *
 * Anything else returns null and the full CLI runs the command line: another command or flag
 * (a bad one included: the full CLI reports it), no ticket, a config that changed, or a
 * sandboxd that does not accept the ticket's connection (the command never started there).
 */
import type { SandboxdLifecycle } from "@sandpit/sdk";
import { commandText } from "./parse.ts";
import { reportError } from "./exit.ts";
import { forgetTicket, readTicket } from "./exec-ticket.ts";
import { runForeground } from "./exec-run.ts";

export interface PlainExec {
  id: string;
  argv: string[];
  json: boolean;
  config: string | undefined;
}

/** The command line (after `node sandpit`) as a plain exec, or null. */
export function plainExec(args: string[]): PlainExec | null {
  let json = false;
  let config: string | undefined;
  const words: string[] = [];
  let i = 0;
  for (; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--") break;
    if (a === "--json") json = true;
    else if (a === "-c" || a === "--config") {
      config = args[++i];
      if (config === undefined) return null;
    } else if (a.startsWith("--config=")) config = a.slice("--config=".length);
    else if (a.startsWith("-")) return null;
    else words.push(a);
  }
  const [command, id, ...rest] = words;
  const argv = [...rest, ...args.slice(i + 1)];
  if (command !== "exec" || !id || argv.length === 0) return null;
  return { id, argv, json, config };
}

/** Runs a plain exec over its ticket; null when the full CLI must run the command line. */
export async function fastExec(args: string[]): Promise<number | null> {
  const plain = plainExec(args);
  if (!plain) return null;
  const ticket = readTicket(plain.id, plain.config);
  if (!ticket) return null;
  const [{ SandboxdClient }, { SandboxdInstance }] = await Promise.all([
    import("@sandpit/sdk/sandboxd-client"),
    import("@sandpit/sdk/sandboxd-instance"),
  ]);
  const client = new SandboxdClient(ticket.connection);
  const elsewhere = () => Promise.reject(new Error("exec tickets only run commands"));
  const lifecycle: SandboxdLifecycle = {
    connect: () => Promise.resolve(client),
    pause: elsewhere,
    kill: elsewhere,
    getHost: elsewhere,
    setTimeout: elsewhere,
    info: elsewhere,
  };
  const sandbox = new SandboxdInstance(ticket.sandboxId, lifecycle, ticket.defaults);
  try {
    return await runForeground(sandbox, commandText(plain.argv), { base: {}, json: plain.json });
  } catch (err) {
    if (!notReached(err)) return reportError(err);
    forgetTicket(plain.id, plain.config);
    return null;
  } finally {
    await client.destroy();
  }
}

/**
 * Failures that mean the command never started: sandboxd refused the token (it was restarted
 * with another, or another sandbox has the address now), or nothing listens at the address.
 */
const NOT_LISTENING = new Set(["ECONNREFUSED", "ENOENT", "EHOSTUNREACH", "ENETUNREACH"]);

function notReached(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: { code?: unknown; cause?: { code?: unknown } } };
  if (e?.code === "UNAUTHORIZED") return true;
  if (e?.code !== "CONNECTION_FAILED") return false;
  const cause = e.cause?.code ?? e.cause?.cause?.code;
  return typeof cause === "string" && NOT_LISTENING.has(cause);
}
