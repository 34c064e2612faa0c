/**
 * What the Docker provider needs from a container engine, so Docker (dockerode) and Apple's
 * `container` CLI are interchangeable behind it.
 */

export interface ContainerSpec {
  name: string;
  image: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  /** Volume mounted at /mnt/user-data; created if missing, kept when the container goes. */
  volume: string;
  /** Publish sandboxd's port 8080 on bindHost:hostPort (with network on). */
  hostPort: number | null;
  bindHost: string;
  /**
   * With network off: no network at all ("none"); sandboxd listens on a unix socket in this
   * host directory, bind-mounted at SOCKET_MOUNT, and is reached through it.
   */
  socketDir: string | null;
  cpus: number;
  memoryBytes: number;
  pids: number;
  readOnlyRoot: boolean;
  /** Host paths bound into the container (the caller's `mounts`). */
  binds?: { source: string; target: string; readOnly?: boolean | undefined }[];
}

export interface ContainerInfo {
  name: string;
  id: string;
  running: boolean;
  labels: Record<string, string>;
  env: Record<string, string>;
  /** Where sandboxd answers: "host:port" (published port) or "unix:/path/to/socket". */
  endpoint: string | null;
  /** Name of the volume at /mnt/user-data. */
  volume: string | null;
  /** Exit details when not running, e.g. "OOMKilled". */
  state: string;
  /** The exit status of its last run, where the engine reports it (with startedAt). */
  exitCode?: number;
  /** When its current (or last) run started. */
  startedAt?: Date;
  image?: string;
  createdAt?: Date;
  /** The limits it runs with, where the engine reports them. */
  cpus?: number;
  memoryBytes?: number;
}

export interface ContainerSummary {
  name: string;
  running: boolean;
  labels: Record<string, string>;
}

/** Thrown by `run` when the host port is taken, so the caller can retry on another port. */
export class PortConflictError extends Error {
  override readonly name = "PortConflictError";
}
/** Thrown by `run` when a container of that name exists already (another process won the race). */
export class NameConflictError extends Error {
  override readonly name = "NameConflictError";
}

export interface ContainerRuntime {
  readonly kind: "docker" | "apple";
  /** Throws SandboxError CONNECTION_FAILED, saying how to start the engine, when it does not answer. */
  ping(): Promise<void>;
  inspect(name: string): Promise<ContainerInfo | null>;
  /** Creates and starts a container. */
  run(spec: ContainerSpec): Promise<ContainerInfo>;
  start(name: string): Promise<ContainerInfo>;
  stop(name: string): Promise<void>;
  /** Removes the container and, with `volume`, that volume too. Missing ones are fine. */
  remove(name: string, volume: string | null): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** Containers whose name starts with `prefix`. */
  list(prefix: string): Promise<ContainerInfo[]>;
  /** The same, cheaply: names, labels and whether they run, in one engine call. */
  summaries(prefix: string): Promise<ContainerSummary[]>;
  imageExists(image: string): Promise<boolean>;
}

export const SANDBOXD_PORT = 8080;
export const DATA_MOUNT = "/mnt/user-data";
export const SOCKET_MOUNT = "/run/sandpit";
