/**
 * The sandpit command driven as a person would, on the local provider: every command that works
 * on a sandbox each CLI process reaches again by ID, `--json` parsed, exit codes, bad input.
 * (ls, info, timeout, port and background processes across invocations: cli-sdkapi.test.ts.)
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CliHarness } from "./harness.ts";

const cli = new CliHarness();
let id: string;

beforeAll(async () => {
  id = (await cli.ok(["create"])).trim();
}, 120_000);

afterAll(async () => {
  await cli.run(["rm", id]);
  await cli.cleanup();
});

/** One line on stderr, starting `sandpit: `, and no stack trace. */
function expectOneLine(stderr: string): void {
  expect(stderr).toMatch(/^sandpit: [^\n]+\n$/);
  expect(stderr).not.toMatch(/\n\s+at /);
}

describe("help and usage errors", () => {
  it("--help lists every command and exits 0; each command has its own --help", async () => {
    const r = await cli.run(["--help"]);
    expect(r.code).toBe(0);
    const commands = [
      "create",
      "ls",
      "info",
      "exec",
      "shell",
      "cp",
      "ps",
      "logs",
      "kill",
      "port",
      "pause",
      "resume",
      "rm",
      "timeout",
      "up",
      "serve",
      "mcp",
      "completion",
    ];
    for (const c of commands) expect(r.stdout).toMatch(new RegExp(`^  ${c}\\b`, "m"));
    const helps = await Promise.all(commands.map((c) => cli.run([c, "--help"])));
    helps.forEach((h, i) => {
      expect(h.code, commands[i]).toBe(0);
      expect(h.stdout).toContain(`Usage: sandpit ${commands[i]}`);
      // serve prints what it serves as SANDPIT_* lines, for scripts; it has no --json.
      if (commands[i] !== "serve") expect(h.stdout).toContain("--json");
    });
  });

  it("--version prints the package's version", async () => {
    const r = await cli.run(["--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("bad flags, unknown commands, missing and bad arguments: one line, exit 2", async () => {
    for (const args of [
      ["create", "--bogus"],
      ["frobnicate"],
      ["exec"],
      ["create", "--language", "cobol"],
      ["create", "--ttl", "soon"],
      ["exec", id, "ls", "-la"],
      ["logs", id, "not-a-pid"],
      ["port", id, "70000"],
      ["kill", id, "1", "--signal", "SIGFOO"],
      ["completion", "tcsh"],
      ["cp", "a", "b"],
      ["--config", "/nonexistent/sandpit.yaml", "create"],
    ]) {
      const r = await cli.run(args);
      expect(r.code, args.join(" ")).toBe(2);
      expectOneLine(r.stderr);
      expect(r.stdout).toBe("");
    }
  });

  it("no command prints the help on stderr and exits 2", async () => {
    const r = await cli.run([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain("Usage: sandpit");
  });

  it("an unknown sandbox is a runtime failure: one line, exit 1; SANDPIT_DEBUG=1 adds the stack", async () => {
    const r = await cli.run(["exec", "default.no-such-sandbox", "--", "true"]);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr);
    expect(r.stderr).toContain("no-such-sandbox");
    const debug = await cli.run(["exec", "default.no-such-sandbox", "--", "true"], {
      env: { SANDPIT_DEBUG: "1" },
    });
    expect(debug.code).toBe(1);
    expect(debug.stderr).toMatch(/\n\s+at /);
  });

  it("a bad config and an unknown SANDPIT_PROVIDER are one line each, exit 2", async () => {
    const bad = join(cli.dir, "bad.yaml");
    writeFileSync(bad, "sandbox:\n  use: local\n  colour: blue\n");
    const r = await cli.run(["--config", bad, "create"]);
    expect(r.code).toBe(2);
    expectOneLine(r.stderr);
    expect(r.stderr).toContain("colour");
    const p = await cli.run(["create"], { env: { SANDPIT_PROVIDER: "nowhere" } });
    expect(p.code).toBe(2);
    expectOneLine(p.stderr);
    expect(p.stderr).toContain("nowhere");
  });

  it("finds ./sandpit.yaml in the working directory (or a parent) without SANDPIT_CONFIG", async () => {
    const dir = join(cli.dir, "project", "sub");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(cli.dir, "project", "sandpit.yaml"), readFileSync(cli.config));
    const r = await cli.run(["exec", id, "--", "echo", "found"], {
      cwd: dir,
      env: { SANDPIT_CONFIG: "" },
    });
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("found\n");
  });
});

describe("create", () => {
  it("prints the new sandbox's ID; --json gives {sandboxId}; env and language apply", async () => {
    const out = await cli.ok(["--json", "create", "-l", "typescript", "-e", "GREETING=hello"]);
    const { sandboxId } = JSON.parse(out) as { sandboxId: string };
    try {
      expect(sandboxId).toMatch(/^default\./);
      expect(await cli.ok(["exec", sandboxId, "--", "sh", "-c", "echo $GREETING"])).toBe("hello\n");
    } finally {
      await cli.ok(["rm", sandboxId]);
    }
  });
});

describe("exec", () => {
  it("streams stdout and stderr apart and exits with the command's code (3 → 3)", async () => {
    const r = await cli.run(["exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    expect(r).toEqual({ code: 3, stdout: "out\n", stderr: "err\n" });
  });

  it("--json prints a result object (and still exits with the command's code)", async () => {
    const r = await cli.run([
      "--json",
      "exec",
      id,
      "--",
      "sh",
      "-c",
      "echo out; echo err >&2; exit 5",
    ]);
    expect(r.code).toBe(5);
    const result = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(result).toMatchObject({ exitCode: 5, stdout: "out\n", stderr: "err\n" });
    expect(typeof result.durationMs).toBe("number");
  });

  it("several arguments are an argv (quoted); one argument is shell text", async () => {
    expect(await cli.ok(["exec", id, "--", "printf", "%s|", "a b", "$HOME", "it's"])).toBe(
      "a b|$HOME|it's|",
    );
    expect(await cli.ok(["exec", id, "--", "echo one two | wc -w"])).toMatch(/^\s*2\n$/);
  });

  it("--cwd and -e apply", async () => {
    await cli.ok(["exec", id, "--", "mkdir", "-p", "/mnt/user-data/cli-cwd"]);
    const out = await cli.ok([
      "exec",
      id,
      "--cwd",
      "/mnt/user-data/cli-cwd",
      "-e",
      "A=1",
      "-e",
      "B=two",
      "--",
      "sh",
      "-c",
      "pwd; echo $A $B",
    ]);
    expect(out).toBe("/mnt/user-data/cli-cwd\n1 two\n");
  });

  it("-i forwards stdin until EOF", async () => {
    const input = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join("\n") + "\n";
    const r = await cli.run(["exec", "-i", id, "--", "sh", "-c", "wc -l; exit 4"], { input });
    expect(r.code).toBe(4);
    expect(r.stdout.trim()).toBe("2000");
    const cat = await cli.run(["exec", "-i", id, "--", "cat"], { input: "héllo\nwörld\n" });
    expect(cat).toEqual({ code: 0, stdout: "héllo\nwörld\n", stderr: "" });
  });

  it("--timeout kills the command: one line, exit 1", async () => {
    const r = await cli.run(["exec", "--timeout", "500ms", id, "--", "sleep", "30"]);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr);
    expect(r.stderr).toContain("timed out");
  });
});

describe("cp", () => {
  function tree(root: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const e of readdirSync(root, { recursive: true, withFileTypes: true })) {
      if (e.isFile()) {
        const p = join(e.parentPath, e.name);
        out[relative(root, p)] = readFileSync(p).toString("base64");
      }
    }
    return out;
  }

  it("copies a directory in and back out, contents equal; --json summarizes", async () => {
    const src = join(cli.cwd, "project");
    mkdirSync(join(src, "deep", "er"), { recursive: true });
    writeFileSync(join(src, "a.txt"), "alpha\n");
    writeFileSync(
      join(src, "deep", "b.bin"),
      Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) % 256)),
    );
    writeFileSync(join(src, "deep", "er", "empty"), "");
    mkdirSync(join(src, "hollow"));
    // Into an existing directory: lands under the source's name.
    const up = JSON.parse(
      await cli.ok(["--json", "cp", src, `${id}:/mnt/user-data/workspace`]),
    ) as Record<string, unknown>;
    expect(up).toMatchObject({ to: "/mnt/user-data/workspace/project", files: 3, bytes: 300_006 });
    expect(
      await cli.ok([
        "exec",
        id,
        "--",
        "sh",
        "-c",
        "cd /mnt/user-data/workspace/project && find . | sort",
      ]),
    ).toBe(".\n./a.txt\n./deep\n./deep/b.bin\n./deep/er\n./deep/er/empty\n./hollow\n");
    // Out to a new name (relative sandbox paths start at the workspace).
    const back = join(cli.cwd, "back");
    await cli.ok(["cp", `${id}:project`, back]);
    expect(tree(back)).toEqual(tree(src));
    expect(existsSync(join(back, "hollow"))).toBe(true);
  });

  it("copies single files both ways, into a directory or to a new name", async () => {
    const file = join(cli.cwd, "one.txt");
    writeFileSync(file, "just one\n");
    await cli.ok(["cp", file, `${id}:/mnt/user-data/workspace/files/`]);
    await cli.ok(["cp", file, `${id}:files/renamed.txt`]);
    expect(
      await cli.ok([
        "exec",
        id,
        "--",
        "cat",
        "/mnt/user-data/workspace/files/one.txt",
        "files/renamed.txt",
      ]),
    ).toBe("just one\njust one\n");
    mkdirSync(join(cli.cwd, "into"));
    await cli.ok(["cp", `${id}:/mnt/user-data/workspace/files/renamed.txt`, join(cli.cwd, "into")]);
    expect(readFileSync(join(cli.cwd, "into", "renamed.txt"), "utf8")).toBe("just one\n");
  });

  it("a missing source is one line and a non-zero exit", async () => {
    const r = await cli.run(["cp", `${id}:/mnt/user-data/nothing-here`, join(cli.cwd, "x")]);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr);
    const l = await cli.run(["cp", join(cli.cwd, "nothing-here"), `${id}:x`]);
    expect(l.code).toBe(2);
    expectOneLine(l.stderr);
  });
});

describe("lifecycle", () => {
  it("pause keeps the files, exec resumes; rm deletes the sandbox", async () => {
    const other = (await cli.ok(["create"])).trim();
    await cli.ok(["exec", other, "--", "sh", "-c", "echo kept > /mnt/user-data/workspace/f"]);
    expect(JSON.parse(await cli.ok(["--json", "pause", other]))).toEqual([
      { sandboxId: other, paused: true },
    ]);
    expect(JSON.parse(await cli.ok(["--json", "resume", other]))).toEqual([
      { sandboxId: other, resumed: true },
    ]);
    expect(await cli.ok(["exec", other, "--", "cat", "/mnt/user-data/workspace/f"])).toBe("kept\n");
    expect(JSON.parse(await cli.ok(["--json", "rm", other]))).toEqual([
      { sandboxId: other, removed: true },
    ]);
    const r = await cli.run(["exec", other, "--", "true"]);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr);
  });

  it("ps --json is a list (processes of this sandbox, parsed)", async () => {
    expect(Array.isArray(JSON.parse(await cli.ok(["--json", "ps", id])))).toBe(true);
  });
});

describe("completion", () => {
  it("bash, zsh and fish scripts name every command; bash's parses", async () => {
    for (const shell of ["bash", "zsh", "fish"]) {
      const script = await cli.ok(["completion", shell]);
      for (const c of ["create", "exec", "cp", "logs", "completion"]) expect(script).toContain(c);
      expect(script).toMatch(/--json|-l json/);
    }
    const bash = await cli.ok(["completion", "bash"]);
    execFileSync("bash", ["-n"], { input: bash });
    const words = execFileSync("bash", [
      "-c",
      `${bash}\nCOMP_WORDS=(sandpit ex); COMP_CWORD=1; _sandpit; echo "\${COMPREPLY[@]}"`,
    ]).toString();
    expect(words.trim()).toBe("exec");
    expect(JSON.parse(await cli.ok(["--json", "completion", "fish"]))).toMatchObject({
      shell: "fish",
    });
  });
});

describe("up", () => {
  it("outside a Sandpit checkout: one line saying what to do, exit 1", async () => {
    const r = await cli.run(["up"]);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr);
    expect(r.stderr).toContain("checkout of the Sandpit repository");
  });

  it("inside one: runs its up script with the arguments, exiting with its code", async () => {
    const repo = join(cli.dir, "checkout");
    mkdirSync(join(repo, "deep"), { recursive: true });
    writeFileSync(
      join(repo, "package.json"),
      JSON.stringify({ name: "sandpit", scripts: { up: "echo up ran in $(basename $PWD) with" } }),
    );
    const r = await cli.run(["up", "--", "--kind", "x y"], { cwd: join(repo, "deep") });
    expect(r).toEqual({ code: 0, stdout: "up ran in checkout with --kind x y\n", stderr: "" });
    writeFileSync(
      join(repo, "package.json"),
      JSON.stringify({ name: "sandpit", scripts: { up: "exit 6" } }),
    );
    expect((await cli.run(["up"], { cwd: repo })).code).toBe(6);
  });
});
