/**
 * Prometheus metrics under controller-runtime's names, so the dashboards and alerts written for
 * Go operators work unchanged, plus a few of Sandpit's own. One registry per process.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { type CensusSample, PHASES } from "./census.ts";

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

const r = [registry];

export const reconcileTotal = new Counter({
  name: "controller_runtime_reconcile_total",
  help: "Total number of reconciliations per controller",
  labelNames: ["controller", "result"] as const,
  registers: r,
});
export const reconcileErrors = new Counter({
  name: "controller_runtime_reconcile_errors_total",
  help: "Total number of reconciliation errors per controller",
  labelNames: ["controller"] as const,
  registers: r,
});
export const terminalReconcileErrors = new Counter({
  name: "controller_runtime_terminal_reconcile_errors_total",
  help: "Total number of terminal reconciliation errors per controller",
  labelNames: ["controller"] as const,
  registers: r,
});
export const reconcilePanics = new Counter({
  name: "controller_runtime_reconcile_panics_total",
  help: "Total number of reconciliation panics per controller",
  labelNames: ["controller"] as const,
  registers: r,
});
export const reconcileTime = new Histogram({
  name: "controller_runtime_reconcile_time_seconds",
  help: "Length of time per reconciliation per controller",
  labelNames: ["controller"] as const,
  buckets: [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
  ],
  registers: r,
});
export const maxConcurrentReconciles = new Gauge({
  name: "controller_runtime_max_concurrent_reconciles",
  help: "Maximum number of concurrent reconciles per controller",
  labelNames: ["controller"] as const,
  registers: r,
});
export const activeWorkers = new Gauge({
  name: "controller_runtime_active_workers",
  help: "Number of currently used workers per controller",
  labelNames: ["controller"] as const,
  registers: r,
});

const queueLabels = ["name", "controller"] as const;
export const workqueueDepth = new Gauge({
  name: "workqueue_depth",
  help: "Current depth of workqueue",
  labelNames: queueLabels,
  registers: r,
});
export const workqueueAdds = new Counter({
  name: "workqueue_adds_total",
  help: "Total number of adds handled by workqueue",
  labelNames: queueLabels,
  registers: r,
});
export const workqueueQueueDuration = new Histogram({
  name: "workqueue_queue_duration_seconds",
  help: "How long in seconds an item stays in workqueue before being requested",
  labelNames: queueLabels,
  buckets: [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000],
  registers: r,
});
export const workqueueWorkDuration = new Histogram({
  name: "workqueue_work_duration_seconds",
  help: "How long in seconds processing an item from workqueue takes",
  labelNames: queueLabels,
  buckets: [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000],
  registers: r,
});
export const workqueueRetries = new Counter({
  name: "workqueue_retries_total",
  help: "Total number of retries handled by workqueue",
  labelNames: queueLabels,
  registers: r,
});
export const workqueueUnfinished = new Gauge({
  name: "workqueue_unfinished_work_seconds",
  help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
  labelNames: queueLabels,
  registers: r,
});
export const workqueueLongestRunning = new Gauge({
  name: "workqueue_longest_running_processor_seconds",
  help: "How many seconds has the longest running processor for workqueue been running",
  labelNames: queueLabels,
  registers: r,
});

export const leaderElectionStatus = new Gauge({
  name: "leader_election_master_status",
  help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
  labelNames: ["name"] as const,
  registers: r,
});

export const restRequests = new Counter({
  name: "rest_client_requests_total",
  help: "Number of HTTP requests to the API server (watches excepted), partitioned by status code and method",
  labelNames: ["code", "method"] as const,
  registers: r,
});

export const apiWrites = new Counter({
  name: "sandpit_api_writes_total",
  help: "Writes (create, apply, patch, update, delete) the operator made, by resource and verb",
  labelNames: ["resource", "verb"] as const,
  registers: r,
});

export const informerRestarts = new Counter({
  name: "sandpit_informer_restarts_total",
  help: "Informer restarts after a watch or list error, or a stall caught by the watchdog",
  labelNames: ["resource", "cause"] as const,
  registers: r,
});
export const sandboxReadySeconds = new Histogram({
  name: "sandpit_sandbox_ready_seconds",
  help: "Time from Sandbox creation (or resume) to Ready, by how it started",
  labelNames: ["start"] as const, // cold | warm | resume
  buckets: [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120],
  registers: r,
});
export const sandboxTransitions = new Counter({
  name: "sandpit_sandbox_transitions_total",
  help: "Sandbox lifecycle transitions by reason (Ready, Suspended, Evicted, Expired, ...)",
  labelNames: ["reason"] as const,
  registers: r,
});

/**
 * The census of the caches (census.ts) the gauges below read at each scrape; the manager sets it.
 * Their namespace label is `sandbox_namespace`: `namespace` is the label Prometheus gives the
 * operator's own pod, and a scraped label of that name would be renamed.
 */
let census: (() => CensusSample) | undefined;
export function countFrom(sample: (() => CensusSample) | undefined): void {
  census = sample;
}

export const sandboxesByPhase = new Gauge({
  name: "sandpit_sandboxes",
  help: "Sandboxes in the operator's cache by status.phase (one without a status yet counts as Pending)",
  labelNames: ["sandbox_namespace", "phase"] as const,
  registers: r,
  collect() {
    this.reset();
    for (const [ns, counts] of census?.().phases ?? [])
      for (const phase of PHASES) this.set({ sandbox_namespace: ns, phase }, counts[phase]);
  },
});
export const pendingOldestSeconds = new Gauge({
  name: "sandpit_sandbox_pending_oldest_seconds",
  help: "How long the oldest Pending Sandbox of the namespace has been Pending, as this replica saw it (0 when none is)",
  labelNames: ["sandbox_namespace"] as const,
  registers: r,
  collect() {
    this.reset();
    for (const [ns, seconds] of census?.().pendingOldestSeconds ?? [])
      this.set({ sandbox_namespace: ns }, seconds);
  },
});

const poolLabels = ["sandbox_namespace", "pool"] as const;
const poolGauge = (
  name: string,
  help: string,
  value: (p: CensusSample["pools"][number]) => number,
) =>
  new Gauge({
    name,
    help,
    labelNames: poolLabels,
    registers: r,
    collect() {
      this.reset();
      for (const p of census?.().pools ?? [])
        this.set({ sandbox_namespace: p.namespace, pool: p.pool }, value(p));
    },
  });
export const poolMaxActive = poolGauge(
  "sandpit_pool_max_active",
  "A SandboxPool's spec.maxActive: the most Ready sandboxes it runs at once",
  (p) => p.maxActive,
);
export const poolActive = poolGauge(
  "sandpit_pool_active",
  "A SandboxPool's status.active: Ready sandboxes counted against maxActive",
  (p) => p.active,
);
export const poolWarm = poolGauge(
  "sandpit_pool_warm",
  "A SandboxPool's spec.warm: idle pre-started sandboxes it keeps",
  (p) => p.warm,
);
export const poolWarmReady = poolGauge(
  "sandpit_pool_warm_ready",
  "A SandboxPool's status.warmReady: warm sandboxes ready to be claimed",
  (p) => p.warmReady,
);
