/** ContainerRuntime over the Docker Engine API (dockerode). */
import Docker from "dockerode";
import { SandboxError } from "../../errors.ts";
import {
  DATA_MOUNT,
  NameConflictError,
  PortConflictError,
  SANDBOXD_PORT,
  SOCKET_MOUNT,
  type ContainerInfo,
  type ContainerRuntime,
  type ContainerSpec,
  type ContainerSummary,
} from "./runtime.ts";

const PORT_KEY = `${SANDBOXD_PORT}/tcp`;

export class DockerRuntime implements ContainerRuntime {
  readonly kind = "docker";
  private readonly docker: Docker;
  private readonly where: string;

  constructor(socketPath: string) {
    this.docker = new Docker({ socketPath });
    this.where = socketPath;
  }

  async ping(): Promise<void> {
    await this.call("ping", () => this.docker.ping());
  }

  async imageExists(image: string): Promise<boolean> {
    try {
      await this.call("inspect image", () => this.docker.getImage(image).inspect());
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw err;
    }
  }

  async inspect(name: string): Promise<ContainerInfo | null> {
    try {
      return toInfo(await this.call("inspect", () => this.docker.getContainer(name).inspect()));
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw err;
    }
  }

  async run(spec: ContainerSpec): Promise<ContainerInfo> {
    await this.call("create volume", () =>
      this.docker.createVolume({ Name: spec.volume, Labels: spec.labels }),
    );
    const mounts: Docker.MountConfig = [
      { Type: "volume", Source: spec.volume, Target: DATA_MOUNT },
    ];
    if (spec.socketDir) mounts.push({ Type: "bind", Source: spec.socketDir, Target: SOCKET_MOUNT });
    for (const b of spec.binds ?? [])
      mounts.push({ Type: "bind", Source: b.source, Target: b.target, ReadOnly: !!b.readOnly });
    let container: Docker.Container;
    try {
      container = await this.call("create", () =>
        this.docker.createContainer({
          name: spec.name,
          Image: spec.image,
          Env: Object.entries({
            ...spec.env,
            ...(spec.socketDir ? { SANDBOXD_LISTEN: `unix:${SOCKET_MOUNT}/sandboxd.sock` } : {}),
          }).map(([k, v]) => `${k}=${v}`),
          Labels: spec.labels,
          ExposedPorts: { [PORT_KEY]: {} },
          HostConfig: {
            PortBindings:
              spec.hostPort === null
                ? {}
                : { [PORT_KEY]: [{ HostIp: spec.bindHost, HostPort: String(spec.hostPort) }] },
            Mounts: mounts,
            NanoCpus: Math.round(spec.cpus * 1e9),
            Memory: spec.memoryBytes,
            MemorySwap: spec.memoryBytes, // no swap: the limit is the limit
            PidsLimit: spec.pids,
            SecurityOpt: ["no-new-privileges"],
            CapDrop: ["ALL"],
            ReadonlyRootfs: spec.readOnlyRoot,
            Tmpfs: { "/tmp": `rw,nosuid,nodev,size=${tmpSizeMb(spec.memoryBytes)}m,mode=1777` },
            NetworkMode: spec.socketDir ? "none" : "bridge",
            RestartPolicy: { Name: "no" },
          },
        }),
      );
    } catch (err) {
      if (statusOf(err) === 409)
        throw new NameConflictError(`container ${spec.name} already exists`);
      throw err;
    }
    try {
      await this.call("start", () => container.start());
    } catch (err) {
      // 304: a process adopting this container (it lost the name race) started it first.
      if (statusOf(err) === 304) return (await this.inspect(spec.name))!;
      await container.remove({ force: true }).catch(() => undefined);
      if (/address already in use|port is already allocated/i.test(messageOf(err))) {
        throw new PortConflictError(`host port ${spec.hostPort} is taken`);
      }
      throw err;
    }
    return (await this.inspect(spec.name))!;
  }

  async start(name: string): Promise<ContainerInfo> {
    try {
      await this.call("start", () => this.docker.getContainer(name).start());
    } catch (err) {
      if (statusOf(err) !== 304) throw err; // 304: already running
    }
    const info = await this.inspect(name);
    if (!info) throw new SandboxError(`container ${name} disappeared while starting`, "NOT_FOUND");
    return info;
  }

  async stop(name: string): Promise<void> {
    try {
      await this.call("stop", () => this.docker.getContainer(name).stop({ t: 5 }));
    } catch (err) {
      if (statusOf(err) !== 304 && statusOf(err) !== 404) throw err;
    }
  }

  async remove(name: string, volume: string | null): Promise<void> {
    try {
      await this.call("remove", () => this.docker.getContainer(name).remove({ force: true }));
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    if (volume) {
      try {
        await this.call("remove volume", () => this.docker.getVolume(volume).remove());
      } catch (err) {
        if (statusOf(err) !== 404) throw err;
      }
    }
  }

  async rename(from: string, to: string): Promise<void> {
    try {
      await this.call("rename", () => this.docker.getContainer(from).rename({ name: to }));
    } catch (err) {
      if (statusOf(err) === 409) throw new NameConflictError(`container ${to} already exists`);
      throw err;
    }
  }

  async summaries(prefix: string): Promise<ContainerSummary[]> {
    const all = await this.call("list", () =>
      this.docker.listContainers({ all: true, filters: { name: [prefix] } }),
    );
    return all.flatMap((c) => {
      const name = c.Names.map((n) => n.replace(/^\//, "")).find((n) => n.startsWith(prefix));
      return name ? [{ name, running: c.State === "running", labels: c.Labels ?? {} }] : [];
    });
  }

  async list(prefix: string): Promise<ContainerInfo[]> {
    const all = await this.call("list", () =>
      this.docker.listContainers({ all: true, filters: { name: [prefix] } }),
    );
    const infos = await Promise.all(
      all
        .filter((c) => c.Names.some((n) => n.replace(/^\//, "").startsWith(prefix)))
        .map((c) => this.inspect(c.Id)),
    );
    return infos.filter((i): i is ContainerInfo => i !== null);
  }

  /** Engine calls: a daemon that is not there becomes CONNECTION_FAILED saying how to start it. */
  private async call<T>(what: string, op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (
        code === "ECONNREFUSED" ||
        code === "ENOENT" ||
        code === "EACCES" ||
        code === "ECONNRESET"
      ) {
        throw new SandboxError(
          `cannot reach the Docker engine at ${this.where} (${code}) during ${what}: start it (e.g. \`sudo systemctl start docker\` or \`sudo dockerd &\`)${code === "EACCES" ? ", or add your user to the docker group" : ""}`,
          "CONNECTION_FAILED",
          err,
        );
      }
      throw err;
    }
  }
}

function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number }).statusCode;
}

function messageOf(err: unknown): string {
  const e = err as { message?: string; json?: { message?: string } };
  return `${e.json?.message ?? ""} ${e.message ?? ""}`;
}

function toInfo(c: Docker.ContainerInspectInfo): ContainerInfo {
  const env = Object.fromEntries(
    (c.Config.Env ?? []).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );
  const published = c.NetworkSettings.Ports?.[PORT_KEY]?.[0];
  const socketDir = c.Mounts.find((m) => m.Destination === SOCKET_MOUNT)?.Source;
  const endpoint = socketDir
    ? `unix:${socketDir}/sandboxd.sock`
    : published
      ? `${published.HostIp || "127.0.0.1"}:${published.HostPort}`
      : null;
  return {
    name: c.Name.replace(/^\//, ""),
    id: c.Id,
    running: c.State.Running,
    labels: c.Config.Labels ?? {},
    env,
    endpoint: c.State.Running ? endpoint : null,
    volume: c.Mounts.find((m) => m.Destination === DATA_MOUNT)?.Name ?? null,
    state: c.State.OOMKilled ? "OOMKilled" : c.State.Status,
    exitCode: c.State.ExitCode,
    ...(Date.parse(c.State.StartedAt) > 0 ? { startedAt: new Date(c.State.StartedAt) } : {}),
    image: c.Config.Image,
    createdAt: new Date(c.Created),
    ...(c.HostConfig.NanoCpus ? { cpus: c.HostConfig.NanoCpus / 1e9 } : {}),
    ...(c.HostConfig.Memory ? { memoryBytes: c.HostConfig.Memory } : {}),
  };
}

/**
 * The size of a container's /tmp tmpfs in MiB: 512, or half its memory limit when that is
 * smaller, as on Kubernetes (operator/src/workload/manifests.ts tmpSize). A write past it fails
 * with ENOSPC; its pages count against the container's memory limit, so a /tmp as large as the
 * limit, once full, would leave sandboxd none.
 */
export function tmpSizeMb(memoryBytes: number): number {
  return Math.max(1, Math.min(512, Math.floor(memoryBytes / 2 / 1048576)));
}
