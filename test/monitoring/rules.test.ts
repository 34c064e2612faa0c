/**
 * The chart's alerting rules and dashboard without a cluster: rules/sandpit.rules.yaml as Helm
 * renders it is a valid Prometheus rules file (`promtool check rules`), its unit tests pass
 * (`promtool test rules`, one case where each alert fires and one where it does not), the
 * thresholds and selectors come from the values, and every metric the rules and the dashboard
 * name is one the operator or the provisioner exports. (The chart suite, test/chart, runs them
 * all against a real Prometheus scraping an installed release.)
 */
import { execFile } from "node:child_process";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { registry as operatorRegistry } from "../../operator/src/metrics.ts";
import { httpMetrics } from "../../provisioner/src/metrics.ts";
import {
  CHART,
  DASHBOARD,
  RULE_TESTS,
  type RuleGroup,
  dashboardQueries,
  ensurePrometheus,
  promtool,
  renderRules,
  substitute,
} from "./prometheus.ts";

const run = promisify(execFile);
const ROOT = new URL("../../", import.meta.url).pathname;
// The names the unit tests' series carry: release "sandpit" in "sandpit-system".
const RELEASE = "sandpit";
const NAMESPACE = "sandpit-system";

let helmBin: string;
let dir: string;

async function helm(...args: string[]): Promise<string> {
  try {
    const { stdout } = await run(helmBin, args, {
      env: { ...process.env, HELM_CACHE_HOME: join(dir, "helm-cache") },
      maxBuffer: 32 << 20,
      timeout: 120_000,
    });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`helm ${args.slice(0, 2).join(" ")}: ${e.stderr || e.message}`, { cause: err });
  }
}

const rules = (...values: string[]) => renderRules(helm, RELEASE, NAMESPACE, ...values);

/** `promtool test rules` of the unit tests against the rules rendered with `values`. */
async function unitTests(...values: string[]) {
  const at = await mkdtemp(join(dir, "rules-"));
  await writeFile(join(at, "sandpit.rules.yaml"), JSON.stringify(await rules(...values)));
  await copyFile(RULE_TESTS, join(at, "sandpit.rules.test.yaml"));
  return promtool(["test", "rules", "sandpit.rules.test.yaml"], at);
}

const alertsOf = (groups: RuleGroup[]) =>
  groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sandpit-rules-"));
  await ensurePrometheus((line) => process.stderr.write(`[rules] ${line}\n`));
  // The chart suites' Helm: build.sh builds only it when asked (cached after the first time).
  const { stdout } = await run(`${ROOT}test/cluster/build.sh`, ["helm"], {
    timeout: 30 * 60_000,
  });
  helmBin = `${stdout.trim().split("\n").pop()}/helm`;
}, 40 * 60_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the chart's Prometheus rules", () => {
  it("render to a rules file promtool accepts: two groups, the recording rules and the alerts", async () => {
    const r = await rules();
    expect(r.groups.map((g) => g.name)).toEqual(["sandpit.recording", "sandpit.alerts"]);
    expect(alertsOf(r.groups)).toEqual([
      "SandpitSandboxStuckPending",
      "SandpitSandboxStartSlow",
      "SandpitPoolExhausted",
      "SandpitReconcileErrors",
      "SandpitInformerRestarts",
      "SandpitProvisionerErrors",
      "SandpitOperatorNoLeader",
    ]);
    const file = join(dir, "check.rules.yaml");
    await writeFile(file, JSON.stringify(r));
    const count = r.groups.reduce((n, g) => n + g.rules.length, 0);
    const check = await promtool(["check", "rules", file]);
    expect(check, check.output).toMatchObject({ code: 0 });
    expect(check.output).toContain(`SUCCESS: ${count} rules found`);
    // A broken expression is refused: the check reads the expressions.
    const broken = structuredClone(r);
    broken.groups[1]!.rules[0]!.expr = "sum by (namespace (sandpit_sandboxes)";
    await writeFile(file, JSON.stringify(broken));
    expect((await promtool(["check", "rules", file])).code).not.toBe(0);
  });

  it("pass their promtool unit tests, which make every alert fire once and stay quiet once", async () => {
    type AlertTest = { alertname: string; exp_alerts: unknown[] };
    const tests = parse(await readFile(RULE_TESTS, "utf8")) as {
      tests: { alert_rule_test?: AlertTest[] }[];
    };
    const cases = tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const alert of alertsOf((await rules()).groups)) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => c.exp_alerts.length > 0),
        `${alert}: a case where it fires`,
      ).toBe(true);
      expect(
        mine.some((c) => c.exp_alerts.length === 0),
        `${alert}: a case where it does not`,
      ).toBe(true);
    }
    const result = await unitTests();
    expect(result, result.output).toMatchObject({ code: 0 });
    expect(result.output).toContain("SUCCESS");
  });

  it("take their thresholds and selectors from the values", async () => {
    // A pending limit past the test's 12 minutes: that alert's firing case, and only it, fails.
    const raised = await unitTests("--set", "metrics.prometheusRule.thresholds.pendingSeconds=900");
    expect(raised.code).not.toBe(0);
    const failed = [...raised.output.matchAll(/alertname: (\w+), time/g)].map((m) => m[1]);
    expect(failed, raised.output).toEqual(["SandpitSandboxStuckPending"]);

    const r = await rules(
      "--set",
      "metrics.prometheusRule.thresholds.poolExhaustedFor=30m",
      "--set-string",
      'metrics.prometheusRule.selectors.operator=cluster="eu"\\,job="ops"',
      "--set",
      "metrics.prometheusRule.alertLabels.team=platform",
    );
    const all = r.groups.flatMap((g) => g.rules);
    const pool = all.find((x) => x.alert === "SandpitPoolExhausted")!;
    expect(pool.for).toBe("30m");
    expect(pool.labels).toEqual({ severity: "warning", team: "platform" });
    const pending = all.find((x) => x.alert === "SandpitSandboxStuckPending")!;
    expect(pending.expr).toContain(
      'sandpit_sandbox_pending_oldest_seconds{cluster="eu",job="ops"}',
    );
    // The provisioner's selector is still the default: its metrics Service's job.
    const ratio = all.find((x) => x.record === "sandpit:provisioner_5xx_ratio:rate5m")!;
    expect(ratio.expr).toContain('{job="sandpit-provisioner-metrics", code=~"5.."');
  });

  it("render into a PrometheusRule and the dashboard into a ConfigMap only when asked", async () => {
    type Doc = {
      kind: string;
      metadata: { name: string; namespace: string; labels: Record<string, string> };
      spec?: { groups: RuleGroup[] };
      data?: Record<string, string>;
    };
    const render = async (...args: string[]) =>
      parseAllDocuments(
        await helm(
          "template",
          RELEASE,
          CHART,
          "-n",
          NAMESPACE,
          "--api-versions",
          "monitoring.coreos.com/v1/PrometheusRule",
          ...args,
        ),
      )
        .map((d) => d.toJS() as Doc | null)
        .filter((d): d is Doc => d !== null);
    const off = await render();
    expect(off.filter((d) => d.kind === "PrometheusRule" || d.kind === "ConfigMap")).toEqual([]);

    const on = await render(
      "--set",
      "metrics.prometheusRule.enabled=true,metrics.prometheusRule.labels.release=kube-prometheus",
      "--set",
      "metrics.dashboard.enabled=true,metrics.dashboard.namespace=monitoring",
    );
    const rule = on.find((d) => d.kind === "PrometheusRule")!;
    expect(rule.metadata).toMatchObject({ name: "sandpit", namespace: NAMESPACE });
    expect(rule.metadata.labels).toMatchObject({
      release: "kube-prometheus",
      "app.kubernetes.io/instance": RELEASE,
    });
    expect(rule.spec).toEqual(await rules());
    const cm = on.find((d) => d.kind === "ConfigMap")!;
    expect(cm.metadata).toMatchObject({ name: "sandpit-dashboard", namespace: "monitoring" });
    expect(cm.metadata.labels).toMatchObject({ grafana_dashboard: "1" });
    expect(cm.data!["sandpit.json"]).toBe((await readFile(DASHBOARD, "utf8")).trimEnd());
  });
});

describe("the rules and the dashboard name only metrics that exist", () => {
  it("every series they select is one the operator or the provisioner exports, or a recording rule", async () => {
    const exported = new Set<string>();
    const provisioner = httpMetrics().registry;
    for (const reg of [operatorRegistry, provisioner]) {
      for (const m of await reg.getMetricsAsJSON()) {
        exported.add(m.name);
        if (String(m.type) === "histogram")
          for (const s of ["_bucket", "_sum", "_count"]) exported.add(`${m.name}${s}`);
      }
    }
    // The metrics the rules and panels are about, among them the census gauges.
    for (const name of [
      "sandpit_sandboxes",
      "sandpit_sandbox_pending_oldest_seconds",
      "sandpit_pool_active",
      "sandpit_pool_max_active",
      "sandpit_informer_restarts_total",
      "sandpit_provisioner_requests_total",
      "controller_runtime_reconcile_errors_total",
    ])
      expect(exported).toContain(name);

    const groups = (await rules()).groups;
    const recorded = new Set(groups.flatMap((g) => g.rules.flatMap((r) => r.record ?? [])));
    const vars = { operator: "op", provisioner: "prov" };
    const exprs = [
      ...groups.flatMap((g) => g.rules.map((r) => r.expr)),
      ...(await dashboardQueries()).map((q) => substitute(q.expr, vars)),
    ];
    const named = new Set<string>();
    for (const e of exprs) {
      // A metric is selected with its labels (every one of ours names its job) or is a
      // recording rule's name standing alone.
      for (const m of e.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)) named.add(m[1]!);
      for (const m of e.matchAll(/\b(sandpit:[a-z0-9_:]+)/g)) named.add(m[1]!);
    }
    expect(named.size).toBeGreaterThan(20);
    const unknown = [...named].filter((n) => !exported.has(n) && !recorded.has(n));
    expect(unknown).toEqual([]);
  });

  it("the dashboard's panels all query the data source variable, and every variable is one it defines", async () => {
    type Panel = {
      type: string;
      datasource?: { uid: string };
      targets?: { expr: string }[];
      panels?: Panel[];
    };
    const dash = JSON.parse(await readFile(DASHBOARD, "utf8")) as {
      uid: string;
      panels: Panel[];
      templating: { list: { name: string }[] };
    };
    expect(dash.uid).toBe("sandpit");
    const defined = dash.templating.list.map((v) => v.name);
    expect(defined).toEqual(["datasource", "operator", "provisioner"]);
    const panels = dash.panels.filter((p) => p.type !== "row");
    expect(panels.length).toBeGreaterThan(15);
    for (const p of panels) {
      expect(p.datasource?.uid).toBe("${datasource}");
      expect(p.targets?.length).toBeGreaterThan(0);
      for (const t of p.targets!) {
        // Only Grafana's own variables and ours; an unknown one would reach Prometheus as is.
        for (const m of t.expr.matchAll(/\$\{?(\w+)/g))
          expect(["operator", "provisioner", "__rate_interval"]).toContain(m[1]);
      }
    }
  });
});
