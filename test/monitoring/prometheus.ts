/**
 * Debian's Prometheus for the tests: `promtool` checks and unit-tests the chart's rules, and a
 * real `prometheus`, run here as a host process with a config the test writes, scrapes the
 * components and evaluates the rules and the dashboard's queries. Both come from Debian's
 * `prometheus` package, installed with apt-get (as root) when missing.
 */
import { execFile, spawn } from "node:child_process";
import { existsSync, openSync, closeSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { withLock } from "@sandpit/images/lock";
import { parseAllDocuments } from "yaml";
import { freePort } from "../cluster/harness.ts";

const run = promisify(execFile);
export const PROMETHEUS = "/usr/bin/prometheus";
export const PROMTOOL = "/usr/bin/promtool";
const ROOT = new URL("../../", import.meta.url).pathname;
export const CHART = `${ROOT}charts/sandpit`;
/** The promtool unit tests of the rules, beside their source. */
export const RULE_TESTS = `${CHART}/rules/sandpit.rules.test.yaml`;
export const DASHBOARD = `${CHART}/dashboards/sandpit.json`;

/** Installs Debian's `prometheus` (prometheus and promtool) when either is missing. */
export async function ensurePrometheus(log: (line: string) => void = () => undefined) {
  if (existsSync(PROMETHEUS) && existsSync(PROMTOOL)) return;
  if (process.getuid?.() !== 0) {
    throw new Error(
      "promtool and prometheus are missing; as root the tests install Debian's prometheus, otherwise run: sudo apt-get install -y --no-install-recommends prometheus",
    );
  }
  const cache = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "sandpit");
  // Two suites may want it at once; dpkg takes one installer at a time.
  await withLock(
    join(cache, "prometheus-install.lock"),
    { timeoutMs: 15 * 60_000, what: "prometheus install", log },
    async () => {
      if (existsSync(PROMETHEUS) && existsSync(PROMTOOL)) return;
      log("installing Debian's prometheus with apt-get");
      const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
      await run("apt-get", ["update"], { env, timeout: 300_000, maxBuffer: 64 << 20 });
      await run("apt-get", ["install", "-y", "--no-install-recommends", "prometheus"], {
        env,
        timeout: 600_000,
        maxBuffer: 64 << 20,
      });
    },
  );
}

export interface RuleGroup {
  name: string;
  rules: {
    record?: string;
    alert?: string;
    expr: string;
    for?: string;
    labels?: Record<string, string>;
  }[];
}

/**
 * The plain Prometheus rules file: the PrometheusRule's `spec` as `helm template` renders
 * rules/sandpit.rules.yaml with the given values (`helm` runs the chart's Helm with these args).
 */
export async function renderRules(
  helm: (...args: string[]) => Promise<string>,
  release: string,
  namespace: string,
  ...valueArgs: string[]
): Promise<{ groups: RuleGroup[] }> {
  const text = await helm(
    "template",
    release,
    CHART,
    "-n",
    namespace,
    "--api-versions",
    "monitoring.coreos.com/v1/PrometheusRule",
    "--show-only",
    "templates/prometheusrule.yaml",
    "--set",
    "metrics.prometheusRule.enabled=true",
    ...valueArgs,
  );
  const docs = parseAllDocuments(text)
    .map((d) => d.toJS() as { kind?: string; spec?: { groups: RuleGroup[] } } | null)
    .filter((d) => d?.kind === "PrometheusRule");
  if (docs.length !== 1) throw new Error(`expected one PrometheusRule, got ${docs.length}`);
  return { groups: docs[0]!.spec!.groups };
}

export interface PanelQuery {
  panel: string;
  refId: string;
  expr: string;
}

/** Every panel's query in the dashboard (rows' nested panels included). */
export async function dashboardQueries(): Promise<PanelQuery[]> {
  type Panel = {
    title: string;
    panels?: Panel[];
    targets?: { refId: string; expr: string }[];
  };
  const dash = JSON.parse(await readFile(DASHBOARD, "utf8")) as { panels: Panel[] };
  const out: PanelQuery[] = [];
  const walk = (panels: Panel[]) => {
    for (const p of panels) {
      for (const t of p.targets ?? []) out.push({ panel: p.title, refId: t.refId, expr: t.expr });
      walk(p.panels ?? []);
    }
  };
  walk(dash.panels);
  return out;
}

/** Grafana's variables as Grafana would substitute them, for a query run against Prometheus. */
export function substitute(expr: string, vars: Record<string, string>): string {
  const all = { __rate_interval: "1m", __interval: "15s", __range: "1h", ...vars };
  const out = expr.replace(/\$\{(\w+)\}|\$(\w+)/g, (m, a: string, b: string) => {
    const v = all[(a ?? b) as keyof typeof all];
    if (v === undefined) throw new Error(`no value for ${m} in ${expr}`);
    return v;
  });
  return out;
}

export interface PromServer {
  url: string;
  pid: number;
  dir: string;
  /** Its log so far (for a failure message). */
  log(): Promise<string>;
  stop(): Promise<void>;
}

/**
 * Starts `prometheus` on 127.0.0.1 with `config` (YAML) and `rules` written beside it; resolves
 * once it is ready. It is killed after `lifetimeMs` whatever happens, and stop() ends it by PID.
 */
export async function startPrometheus(o: {
  config: string;
  rules: string;
  lifetimeMs: number;
}): Promise<PromServer> {
  const dir = await mkdtemp(join(tmpdir(), "sandpit-prometheus-"));
  await writeFile(join(dir, "prometheus.yml"), o.config);
  await writeFile(join(dir, "rules.yaml"), o.rules);
  const port = await freePort();
  const logPath = join(dir, "prometheus.log");
  const out = openSync(logPath, "a");
  const child = spawn(
    PROMETHEUS,
    [
      `--config.file=${join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--storage.tsdb.retention.time=1h",
      "--log.level=info",
    ],
    { cwd: dir, stdio: ["ignore", out, out] },
  );
  closeSync(out);
  const pid = child.pid;
  if (pid === undefined) throw new Error("prometheus did not start");
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    child.once("exit", () => {
      exited = true;
      resolve();
    }),
  );
  const killer = setTimeout(() => process.kill(pid, "SIGKILL"), o.lifetimeMs);
  killer.unref();
  const url = `http://127.0.0.1:${port}`;
  const log = () => readFile(logPath, "utf8").catch(() => "");
  const stop = async () => {
    clearTimeout(killer);
    if (!exited) {
      process.kill(pid, "SIGTERM");
      const hard = setTimeout(() => !exited && process.kill(pid, "SIGKILL"), 10_000);
      await exit;
      clearTimeout(hard);
    }
    await rm(dir, { recursive: true, force: true });
  };
  const until = Date.now() + 30_000;
  for (;;) {
    if (exited) {
      const text = await log();
      await stop();
      throw new Error(`prometheus exited at start:\n${text.slice(-4000)}`);
    }
    const ok = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(1_000) }).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (Date.now() > until) {
      const text = await log();
      await stop();
      throw new Error(`prometheus not ready within 30 s:\n${text.slice(-4000)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, pid, dir, log, stop };
}

export interface QueryResult {
  status: "success" | "error";
  error?: string;
  data?: {
    resultType: string;
    result: { metric: Record<string, string>; value: [number, string] }[];
  };
}

/** An instant query through the HTTP API; the answer as Prometheus gives it, errors included. */
export async function query(url: string, expr: string): Promise<QueryResult> {
  const res = await fetch(`${url}/api/v1/query`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ query: expr }),
    signal: AbortSignal.timeout(10_000),
  });
  return (await res.json()) as QueryResult;
}

/** Runs promtool with args; resolves with its exit code and output. */
export async function promtool(
  args: string[],
  cwd?: string,
): Promise<{ code: number; output: string }> {
  return run(PROMTOOL, args, { cwd, timeout: 120_000, maxBuffer: 16 << 20 }).then(
    (r) => ({ code: 0, output: r.stdout + r.stderr }),
    (err: { code?: number; stdout?: string; stderr?: string; message: string }) => ({
      code: typeof err.code === "number" ? err.code : -1,
      output: `${err.stdout ?? ""}${err.stderr ?? err.message}`,
    }),
  );
}
