#!/usr/bin/env node
/**
 * The sandpit command's entry point (the package's bin): a plain `sandpit exec` of a sandbox
 * reached before runs straight over its exec ticket (fast-exec.ts); every other command line
 * goes to the full CLI (run.ts). Exits with the command's code.
 *
 * Every invocation is a fresh Node process, so compiling the CLI and the SDK it loads is a cost
 * paid on each one. Node's compile cache keeps the compiled code on disk between runs: in
 * $NODE_COMPILE_CACHE when set, else `node-compile-cache` in the CLI's cache directory
 * ($XDG_CACHE_HOME/sandpit), one subdirectory per Node version. It is only a cache: safe to
 * delete at any time, the next run compiles again and refills it (Node writes it at exit,
 * process.exit() included). It is enabled here, before anything else is imported, so that
 * everything after is cached.
 */
import { enableCompileCache } from "node:module";
import { cacheDir } from "./cache-dir.ts";

enableCompileCache(process.env.NODE_COMPILE_CACHE || cacheDir("node-compile-cache"));
const { fastExec } = await import("./fast-exec.ts");
const code =
  (await fastExec(process.argv.slice(2))) ??
  (await (await import("./run.ts")).runCli(process.argv));
// Stdout and stderr are synchronous for files and pipes on Linux, so nothing written is lost;
// exiting here stops timers and sockets a provider may still hold.
process.exit(code);
