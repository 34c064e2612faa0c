/**
 * What the translator remembers about a sandbox between requests, beyond what sandboxd keeps:
 * how E2B started each process (envd lists a process by its argv, sandboxd by its command line),
 * which pids E2B signalled (so their end reads "signal: killed" as envd's does), the polled
 * watchers, and the code interpreter's default contexts, restarted-context aliases and cell
 * counters. It lives in this process: with several provisioner replicas, a sandbox's polled
 * watchers and default contexts belong to the replica that made them (docs/e2b.md, "Data plane").
 */
import type { SandboxInstance } from "@sandpit/sdk";

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export interface PolledWatcher {
  events: { name: string; type: number }[];
  stop: () => Promise<void>;
  lastPoll: number;
}

/**
 * A code-interpreter context: E2B's language name, and the SandboxInstance context behind it
 * (a restart replaces it, the E2B id stays), or none for bash, whose cells are commands.
 */
export interface InterpreterContext {
  language: string;
  cwd: string;
  target: string | undefined;
}

export interface SandboxState {
  configs: Map<number, ProcessConfig>;
  /** Signals E2B sent, by pid, until the process's end is reported. */
  signalled: Map<number, string>;
  watchers: Map<string, PolledWatcher>;
  /** The context a language's cells run in when the request names none (as E2B's defaults). */
  defaultContexts: Map<string, Promise<string>>;
  /** Contexts made through E2B, by the id E2B was given. */
  contexts: Map<string, InterpreterContext>;
  /** Cells run per E2B context id (`number_of_executions`). */
  executions: Map<string, number>;
}

const MAX_SANDBOXES = 10_000;
const states = new Map<string, SandboxState>();

export function stateOf(instance: SandboxInstance): SandboxState {
  let s = states.get(instance.sandboxId);
  if (!s) {
    // Bounded: the oldest sandbox's memory goes first (it is very likely gone).
    if (states.size >= MAX_SANDBOXES) states.delete(states.keys().next().value!);
    s = {
      configs: new Map(),
      signalled: new Map(),
      watchers: new Map(),
      defaultContexts: new Map(),
      contexts: new Map(),
      executions: new Map(),
    };
    states.set(instance.sandboxId, s);
  }
  return s;
}
