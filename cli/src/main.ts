#!/usr/bin/env node
/**
 * The sandpit command's entry point (the package's bin): runs the command line (run.ts) and
 * exits with its code.
 *
 * Every invocation is a fresh Node process, so compiling the CLI and the SDK it loads is a cost
 * paid on each one. Node's compile cache keeps the compiled code on disk between runs: in
 * $NODE_COMPILE_CACHE when set, else `node-compile-cache` under the OS temp directory, one
 * subdirectory per Node version. It is only a cache: safe to delete at any time, the next run
 * compiles again and refills it (Node writes it at exit, process.exit() included). It is enabled here, before anything else is imported, so that
 * everything after is cached.
 */
import { enableCompileCache } from "node:module";

enableCompileCache();
const { runCli } = await import("./run.ts");
const code = await runCli(process.argv);
// Stdout and stderr are synchronous for files and pipes on Linux, so nothing written is lost;
// exiting here stops timers and sockets a provider may still hold.
process.exit(code);
