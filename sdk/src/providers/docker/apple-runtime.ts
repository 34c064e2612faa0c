/**
 * ContainerRuntime over Apple's `container` CLI (macOS), used when Docker is absent. Each
 * container is a lightweight VM with its own address; the CLI has no rename, so warm pools
 * are a Docker-only feature.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { SandboxError } from "../../errors.ts";
import {
  DATA_MOUNT,
  NameConflictError,
  PortConflictError,
  SANDBOXD_PORT,
  type ContainerInfo,
  type ContainerRuntime,
  type ContainerSpec,
  type ContainerSummary,
} from "./runtime.ts";

const exec = promisify(execFile);

/** The part of `container inspect` / `container list --format json` output we read. */
interface AppleContainer {
  status?: string;
  configuration?: {
    id?: string;
    labels?: Record<string, string>;
    initProcess?: { environment?: string[] };
    publishedPorts?: { hostAddress?: string; hostPort?: number; containerPort?: number }[];
    mounts?: { source?: string; destination?: string; type?: unknown }[];
  };
  networks?: { address?: string }[];
}

export class AppleContainerRuntime implements ContainerRuntime {
  readonly kind = "apple";
  private readonly bin: string;

  constructor(bin = "container") {
    this.bin = bin;
  }

  async ping(): Promise<void> {
    await this.cli(["system", "status"]);
  }

  async imageExists(image: string): Promise<boolean> {
    try {
      await this.cli(["image", "inspect", image]);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  async inspect(name: string): Promise<ContainerInfo | null> {
    try {
      const [c] = JSON.parse(await this.cli(["inspect", name])) as AppleContainer[];
      return c ? toInfo(name, c) : null;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async run(spec: ContainerSpec): Promise<ContainerInfo> {
    await this.cli(["volume", "create", spec.volume]).catch((err: unknown) => {
      if (!/exists/i.test(String((err as Error).message))) throw err;
    });
    const args = [
      "run",
      "--detach",
      "--name",
      spec.name,
      "--cpus",
      String(spec.cpus),
      "--memory",
      `${Math.floor(spec.memoryBytes / 1048576)}M`,
    ];
    for (const [k, v] of Object.entries(spec.env)) args.push("--env", `${k}=${v}`);
    for (const [k, v] of Object.entries(spec.labels)) args.push("--label", `${k}=${v}`);
    if (spec.binds?.length)
      throw new SandboxError(
        "mounts is not supported by the docker provider on Apple's container runtime",
        "NOT_SUPPORTED",
      );
    if (spec.socketDir)
      throw new SandboxError(
        "network: false needs Docker; Apple's container runtime cannot run without a network",
        "INVALID_ARGUMENT",
      );
    if (spec.hostPort !== null)
      args.push("--publish", `${spec.bindHost}:${spec.hostPort}:${SANDBOXD_PORT}`);
    args.push("--volume", `${spec.volume}:${DATA_MOUNT}`);
    if (spec.readOnlyRoot) args.push("--read-only");
    args.push(spec.image);
    try {
      await this.cli(args);
    } catch (err) {
      const message = String((err as Error).message);
      if (/already exists/i.test(message))
        throw new NameConflictError(`container ${spec.name} already exists`);
      if (/address already in use|port .* in use/i.test(message)) {
        await this.remove(spec.name, null);
        throw new PortConflictError(`host port ${spec.hostPort} is taken`);
      }
      throw err;
    }
    const info = await this.inspect(spec.name);
    if (!info)
      throw new SandboxError(
        `container ${spec.name} vanished after it was started`,
        "CONNECTION_FAILED",
      );
    return info;
  }

  async start(name: string): Promise<ContainerInfo> {
    await this.cli(["start", name]);
    const info = await this.inspect(name);
    if (!info) throw new SandboxError(`container ${name} disappeared while starting`, "NOT_FOUND");
    return info;
  }

  async stop(name: string): Promise<void> {
    await this.cli(["stop", name]).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
  }

  async remove(name: string, volume: string | null): Promise<void> {
    await this.cli(["delete", "--force", name]).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    if (volume) {
      await this.cli(["volume", "delete", volume]).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
    }
  }

  rename(from: string, _to: string): Promise<void> {
    return Promise.reject(
      new SandboxError(
        `Apple's container runtime cannot rename ${from}: warm pools need Docker`,
        "INVALID_ARGUMENT",
      ),
    );
  }

  async summaries(prefix: string): Promise<ContainerSummary[]> {
    return (await this.list(prefix)).map(({ name, running, labels }) => ({
      name,
      running,
      labels,
    }));
  }

  async list(prefix: string): Promise<ContainerInfo[]> {
    const all = JSON.parse(
      await this.cli(["list", "--all", "--format", "json"]),
    ) as AppleContainer[];
    return all
      .map((c) => toInfo(c.configuration?.id ?? "", c))
      .filter((c) => c.name.startsWith(prefix));
  }

  private async cli(args: string[]): Promise<string> {
    try {
      const { stdout } = await exec(this.bin, args, {
        timeout: 120_000,
        maxBuffer: 16 * 1024 * 1024,
      });
      return stdout;
    } catch (err) {
      const e = err as { code?: string | number; stderr?: string; message: string };
      if (e.code === "ENOENT") {
        throw new SandboxError(
          "Apple's `container` CLI is not installed (https://github.com/apple/container)",
          "CONNECTION_FAILED",
          err,
        );
      }
      if (/XPC|apiserver|not running|system start/i.test(e.stderr ?? "")) {
        throw new SandboxError(
          `Apple's container service is not running: start it with \`container system start\``,
          "CONNECTION_FAILED",
          err,
        );
      }
      throw new Error(`container ${args[0]} failed: ${(e.stderr ?? e.message).trim()}`, {
        cause: err,
      });
    }
  }
}

function isNotFound(err: unknown): boolean {
  return /not found|no such/i.test(String((err as Error).message));
}

function toInfo(name: string, c: AppleContainer): ContainerInfo {
  const cfg = c.configuration ?? {};
  const env = Object.fromEntries(
    (cfg.initProcess?.environment ?? []).map((kv) => [
      kv.slice(0, kv.indexOf("=")),
      kv.slice(kv.indexOf("=") + 1),
    ]),
  );
  const running = c.status === "running";
  const ip = c.networks?.[0]?.address?.split("/")[0] ?? null;
  const published = cfg.publishedPorts?.find((p) => p.containerPort === SANDBOXD_PORT);
  const endpoint = published?.hostPort
    ? `${published.hostAddress || "127.0.0.1"}:${published.hostPort}`
    : ip
      ? `${ip}:${SANDBOXD_PORT}`
      : null;
  const mount = cfg.mounts?.find((m) => m.destination === DATA_MOUNT);
  return {
    name: cfg.id ?? name,
    id: cfg.id ?? name,
    running,
    labels: cfg.labels ?? {},
    env,
    endpoint: running ? endpoint : null,
    volume: mount?.source ?? null,
    state: c.status ?? "unknown",
  };
}
