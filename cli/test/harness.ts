/**
 * Runs the sandpit command as a person would: a child process of `node cli/src/main.ts`, with a
 * config that points the local provider at a temporary state directory.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalProvider } from "@sandpit/sdk";

export const MAIN = fileURLToPath(new URL("../src/main.ts", import.meta.url));

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

export class CliHarness {
  readonly dir = mkdtempSync(join(tmpdir(), "sandpit-cli-"));
  readonly config = join(this.dir, "sandpit.yaml");
  /** Where commands run: a directory with no sandpit.yaml of its own. */
  readonly cwd = join(this.dir, "work");

  constructor() {
    writeFileSync(
      this.config,
      `sandbox:\n  use: local\n  local:\n    baseDir: ${join(this.dir, "state")}\n`,
    );
    mkdirSync(this.cwd);
  }

  /** The CLI's cache directory (exec tickets, the compile cache). */
  readonly cache = join(this.dir, "cache");

  /** Environment of every run: this config and cache, nothing inherited that would pick another. */
  env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SANDPIT_CONFIG: this.config,
      XDG_CACHE_HOME: this.cache,
      ...extra,
    };
    for (const k of ["SANDPIT_PROVIDER", "SANDPIT_DEBUG", "SANDPIT_LOG_LEVEL"])
      if (!(k in extra)) delete env[k];
    return env;
  }

  run(
    args: string[],
    o: { input?: string; env?: Record<string, string>; cwd?: string } = {},
  ): Promise<Run> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [MAIN, ...args], {
        cwd: o.cwd ?? this.cwd,
        env: this.env(o.env),
        stdio: ["pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
      child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(o.input ?? "");
    });
  }

  /** Runs and expects success; returns stdout. */
  async ok(args: string[], o: Parameters<CliHarness["run"]>[1] = {}): Promise<string> {
    const r = await this.run(args, o);
    if (r.code !== 0)
      throw new Error(`sandpit ${args.join(" ")} exited ${r.code}: ${r.stderr.trim()}`);
    return r.stdout;
  }

  /** Local sandboxes keep running after the CLI exits: the ones left are killed first. */
  async cleanup(): Promise<void> {
    const provider = new LocalProvider({ baseDir: join(this.dir, "state") });
    for (const s of await provider.list())
      await (await provider.resume(s.sandboxId)).kill().catch(() => undefined);
    await provider.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
