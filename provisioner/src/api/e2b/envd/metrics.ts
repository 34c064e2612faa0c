/**
 * envd's `GET /metrics`: the sandbox's CPU, memory and disk use, read inside the sandbox from
 * /proc and df (what envd reports, in its field names). sandboxd has no metrics route, so this
 * is one short command.
 */
import type { ServerResponse } from "node:http";
import type { SandboxInstance } from "@sandpit/sdk";

const PROBE = [
  "nproc",
  "head -1 /proc/stat",
  "sleep 0.1",
  "head -1 /proc/stat",
  "awk '/^MemTotal:|^MemAvailable:/ {print $2}' /proc/meminfo",
  "df -Pk . | tail -1",
].join("; ");

export async function serveMetrics(res: ServerResponse, instance: SandboxInstance): Promise<void> {
  const { stdout } = await instance.commands.run(PROBE, { timeoutMs: 10_000 });
  const lines = stdout.trim().split("\n");
  const cpus = Number(lines[0]) || 1;
  const ticks = (l: string | undefined) => (l ?? "").trim().split(/\s+/).slice(1).map(Number);
  const [a, b] = [ticks(lines[1]), ticks(lines[2])];
  const total = b.reduce((s, x) => s + x, 0) - a.reduce((s, x) => s + x, 0);
  const idle = (b[3] ?? 0) + (b[4] ?? 0) - (a[3] ?? 0) - (a[4] ?? 0);
  const memTotalKb = Number(lines[3]) || 0;
  const memAvailKb = Number(lines[4]) || 0;
  const df = (lines[5] ?? "").trim().split(/\s+/);
  const body = JSON.stringify({
    ts: Math.floor(Date.now() / 1000),
    cpu_count: cpus,
    cpu_used_pct: total > 0 ? Math.round(((total - idle) / total) * 10_000) / 100 : 0,
    mem_total: memTotalKb * 1024,
    mem_used: (memTotalKb - memAvailKb) * 1024,
    disk_total: (Number(df[1]) || 0) * 1024,
    disk_used: (Number(df[2]) || 0) * 1024,
  });
  res.writeHead(200, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}
