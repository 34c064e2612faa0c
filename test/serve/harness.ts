/**
 * `sandpit serve` as a child process, as a user runs it: `node provisioner/src/serve/main.ts`
 * with flags, its URL read from the SANDPIT_URL line it prints. Stopped (or SIGKILLed) by PID.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { LocalProvider } from "@sandpit/sdk";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import { afterAll, beforeAll, expect } from "vitest";
import type { ContractTarget } from "../contract/suite.ts";
import type { E2BConnection } from "../e2b-compat/targets.ts";

const MAIN = new URL("../../provisioner/src/serve/main.ts", import.meta.url).pathname;

export interface ServeProcess {
  url: string;
  /** The E2B-compatible API's URL (SANDPIT_E2B_URL). */
  e2bUrl: string;
  /** The key serve generated, when no SANDPIT_API_KEYS was given. */
  generatedKey: string | undefined;
  child: ChildProcess;
  /** What it wrote on stderr so far. */
  stderr: () => string;
  /**
   * The value of a later `NAME=value` line on stdout, waited for at most `ms`; rejected at once
   * when stderr matches `failWhen`.
   */
  line: (name: string, ms: number, failWhen?: RegExp) => Promise<string>;
  /** SIGTERM, and waits for the exit. */
  stop: () => Promise<void>;
  /** SIGKILL, and waits for the exit: nothing of serve gets to clean up. */
  kill: () => Promise<void>;
}

export const KEYS = {
  a: "serve-tenant-a-key-0123456789abcdef",
  b: "serve-tenant-b-key-0123456789abcdef",
  small: "serve-tenant-s-key-0123456789abcdef",
  deerflow: "serve-deerflow-key-0123456789abcdef",
};

export const KEY_LIST = [
  { key: KEYS.a, tenant: "a", maxSandboxes: 50 },
  { key: KEYS.b, tenant: "b", maxSandboxes: 50 },
  { key: KEYS.small, tenant: "small", maxSandboxes: 1 },
  { key: KEYS.deerflow, tenant: "deerflow", maxSandboxes: 20 },
];

/**
 * Starts serve. Its first sandbox (made once it serves) is off unless `firstSandbox`: the suites
 * count and list sandboxes, and would find it.
 */
export async function startServe(
  args: string[],
  env: Record<string, string> = { SANDPIT_API_KEYS: JSON.stringify(KEY_LIST) },
  { firstSandbox = false }: { firstSandbox?: boolean } = {},
): Promise<ServeProcess> {
  const flags = ["--port", "0", ...(firstSandbox ? [] : ["--no-first-sandbox"]), ...args];
  const child = spawn(process.execPath, [MAIN, ...flags], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  const lineSeen = new Set<() => void>();
  child.stderr!.on("data", (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-20_000);
    for (const f of lineSeen) f();
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const lines: Record<string, string> = {};
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${stderr}`)), 60_000);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${child.exitCode}):\n${stderr}`));
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const [k, ...v] = line.split("=");
      lines[k!] = v.join("=");
      for (const f of lineSeen) f();
      if (k === "SANDPIT_URL") {
        clearTimeout(timer);
        // The key line, if any, follows in the same write.
        setImmediate(resolve);
      }
    });
  });
  const signal = async (sig: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    await exited;
  };
  return {
    url: lines.SANDPIT_URL!,
    e2bUrl: lines.SANDPIT_E2B_URL!,
    generatedKey: lines.SANDPIT_API_KEY,
    child,
    stderr: () => stderr,
    line: (name, ms, failWhen) =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          if (lines[name] !== undefined) {
            finish();
            resolve(lines[name]);
          } else if (failWhen?.test(stderr)) {
            finish();
            reject(new Error(`serve printed no ${name}= line:\n${stderr}`));
          }
        };
        const finish = () => {
          clearTimeout(timer);
          lineSeen.delete(check);
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`serve printed no ${name}= line within ${ms} ms:\n${stderr}`));
        }, ms);
        lineSeen.add(check);
        check();
      }),
    stop: () => signal("SIGTERM"),
    kill: () => signal("SIGKILL"),
  };
}

export interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
  headers: Headers;
}

/** One API call: a JSON body (or a raw string), the key as Bearer or X-API-Key. */
export async function call(
  base: string,
  method: string,
  path: string,
  key?: { bearer?: string; apiKey?: string },
  body?: unknown,
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (key?.bearer) headers.authorization = `Bearer ${key.bearer}`;
  if (key?.apiKey) headers["x-api-key"] = key.apiKey;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json, headers: res.headers };
}

/**
 * Removes a serve state directory. Local sandboxes outlive serve (their sandboxd runs detached,
 * so a restarted serve finds them): the ones still running are stopped first, so a test leaves
 * no process behind. Docker's containers are the docker tests' own cleanup.
 */
export async function removeState(stateDir: string): Promise<void> {
  const local = new LocalProvider({ baseDir: join(stateDir, "sandboxes") });
  for (const s of await local.list().catch(() => []))
    if (s.state === "running")
      await (await local.resume(s.sandboxId)).kill().catch(() => undefined);
  await local.close();
  await rm(stateDir, { recursive: true, force: true });
}

/**
 * A contract target: serve (with `args`) on a fresh state directory, the SDK's kubernetes
 * provider pointed at it. Package installs on a cold pip cache take minutes, hence the deadlines.
 */
export async function serveContractTarget(
  args: string[],
  env: Record<string, string> = {},
): Promise<ContractTarget> {
  const stateDir = await mkdtemp(join(tmpdir(), "sandpit-serve-contract-"));
  const serve = await startServe(["--state-dir", stateDir, ...args], {
    ...env,
    SANDPIT_API_KEYS: JSON.stringify(KEY_LIST),
    SANDPIT_READY_TIMEOUT_MS: "600000",
  });
  return {
    provider: new KubernetesProvider({
      provisionerUrl: serve.url,
      apiKey: KEYS.a,
      readyTimeoutMs: 600_000,
    }),
    streamBytes: 256 * 1024 * 1024,
    teardown: async () => {
      await serve.stop();
      await removeState(stateDir);
    },
  };
}

/**
 * `sandpit serve` with `args`, its E2B API on out of the box (no token secret given: serve keeps
 * its own, private to its user, in the state directory), for a file running an E2B conformance
 * suite: started before the file's tests, stopped and its state removed after. Returns the
 * connection the suites take (a key with room, and a key whose quota is one sandbox).
 */
export function serveForE2b(
  name: string,
  args: string[],
  env: Record<string, string> = {},
): () => E2BConnection {
  const key = `e2b-serve-${name}-key-0123456789abcdef`;
  const quotaKey = `e2b-serve-${name}-quota-0123456789abcdef`;
  let stateDir: string | undefined;
  let serve: ServeProcess | undefined;
  let connection: E2BConnection | undefined;
  beforeAll(async () => {
    stateDir = await mkdtemp(join(tmpdir(), `sandpit-serve-e2b-${name}-`));
    serve = await startServe([...args, "--state-dir", stateDir], {
      ...env,
      SANDPIT_API_KEYS: JSON.stringify([
        { key, tenant: "e2b", maxSandboxes: 50 },
        { key: quotaKey, tenant: "e2b-quota", maxSandboxes: 1 },
      ]),
      // Package installs (pandas, matplotlib) on a cold pip cache take minutes.
      SANDPIT_READY_TIMEOUT_MS: "600000",
    });
    expect(serve.e2bUrl).toBe(`${serve.url}/e2b`);
    expect((await stat(join(stateDir, "e2b-secret"))).mode & 0o777).toBe(0o600);
    connection = {
      apiKey: key,
      apiUrl: serve.e2bUrl,
      sandboxUrl: serve.e2bUrl,
      quota: { apiKey: quotaKey, maxSandboxes: 1 },
    };
  });
  afterAll(async () => {
    await serve?.stop();
    if (stateDir) await removeState(stateDir);
  });
  return () => {
    if (!connection) throw new Error("serve for the E2B suite did not start");
    return connection;
  };
}
