/**
 * `sandpit shell` through a real terminal: the CLI runs on a node-pty pseudo-terminal, as in a
 * person's terminal emulator; we type into it, resize it and read what it draws.
 */
import { spawn, type IPty } from "node-pty";
import { afterAll, beforeAll, expect, it } from "vitest";
import { CliHarness, MAIN } from "./harness.ts";

const cli = new CliHarness();
let id: string;

beforeAll(async () => {
  id = (await cli.ok(["create"])).trim();
}, 120_000);

afterAll(async () => {
  await cli.run(["rm", id]);
  await cli.cleanup();
});

/** The CLI on a terminal, with its screen output collected and its exit awaited. */
function terminal(args: string[]) {
  const term: IPty = spawn(process.execPath, [MAIN, ...args], {
    cols: 80,
    rows: 24,
    cwd: cli.cwd,
    env: cli.env() as Record<string, string>,
  });
  let screen = "";
  term.onData((d) => (screen += d));
  const exited = new Promise<number>((resolve) => term.onExit(({ exitCode }) => resolve(exitCode)));
  const waitFor = async (pattern: RegExp, ms = 30_000): Promise<string> => {
    const deadline = Date.now() + ms;
    while (!pattern.test(screen)) {
      if (Date.now() > deadline)
        throw new Error(`no ${pattern} on screen: ${JSON.stringify(screen)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return screen;
  };
  return { term, waitFor, exited, screen: () => screen };
}

it("types into the sandbox's shell, follows resizes, exits with the shell's status", async () => {
  const t = terminal(["shell", id]);
  // A marker command proves the shell reads what we type (the prompt varies by shell).
  t.term.write("echo ready-$((20+22))\r");
  await t.waitFor(/ready-42/);
  t.term.resize(120, 40);
  // SIGWINCH reaches the CLI, which resizes the sandbox's terminal; stty reports its size.
  t.term.write("sleep 0.5; stty size\r");
  await t.waitFor(/40 120/);
  t.term.write("echo hi; exit 7\r");
  expect(await t.exited).toBe(7);
  expect(t.screen()).toMatch(/\rhi\r*\n/);
});

it("runs a given command instead of the login shell; Ctrl-C goes to the sandbox", async () => {
  // One argument: shell text the sandbox's shell runs itself (no second shell to catch the INT).
  const t = terminal(["shell", id, "--", "trap 'echo got-int; exit 9' INT; echo armed; sleep 30"]);
  await t.waitFor(/armed/);
  t.term.write("\x03");
  expect(await t.exited).toBe(9);
  expect(t.screen()).toContain("got-int");
});

it("an unknown sandbox: one line, exit 1, the terminal left sane", async () => {
  const t = terminal(["shell", "default.missing"]);
  expect(await t.exited).toBe(1);
  expect(t.screen()).toMatch(/sandpit: [^\n]*missing/);
});
