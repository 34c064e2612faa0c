/** Docker provider options: apart from the provider so config validation does not load dockerode. */
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

export const DockerProviderOptions = z.strictObject({
  /** The sandbox image (built by images/build.ts). */
  image: z.string().min(1).default("sandpit-sandbox:latest"),
  /** Docker socket; default: DOCKER_HOST (unix://) or /var/run/docker.sock. */
  socketPath: z.string().optional(),
  /** "auto" prefers Docker and, on macOS, uses Apple's `container` when Docker is absent. */
  runtime: z.enum(["auto", "docker", "apple"]).default("auto"),
  containerPrefix: z
    .string()
    .regex(/^[a-z0-9][a-z0-9_.-]{0,30}$/, "lower-case letters, digits, _ . -")
    .default("sandpit"),
  bindHost: z.string().default("127.0.0.1"),
  basePort: z.number().int().min(1024).max(65000).default(28080),
  portRange: z.number().int().min(10).max(20000).default(2000),
  cpus: z.number().positive().max(64).default(1),
  memoryMb: z.number().int().min(64).default(1024),
  pids: z.number().int().min(16).default(512),
  /** false: no network at all; sandboxd is reached over a unix socket in socketDir. */
  network: z.boolean().default(true),
  /** Host directory for the sockets of network-less sandboxes (must be local to the engine). */
  socketDir: z.string().default(join(tmpdir(), "sandpit-docker")),
  readOnlyRoot: z.boolean().default(true),
  /** Host directory for lifetimes changed after create (setTimeout); shared by processes. */
  stateDir: z.string().default(join(homedir(), ".local", "state", "sandpit", "docker")),
  /** Running containers idle this long are stopped (their data stays); 0 turns the reaper off. */
  idleTimeoutMs: z
    .number()
    .int()
    .min(0)
    .default(10 * 60_000),
  /**
   * Sandboxes running at once (warm containers aside), counted on the engine across every
   * process with this containerPrefix; 0: no cap.
   */
  maxRunning: z.number().int().min(0).default(0),
  /**
   * At the cap: "reject" fails the start with CAPACITY_EXCEEDED; "lru" stops the running
   * sandbox idle longest (never one with work in flight) to make room.
   */
  onCapacity: z.enum(["reject", "lru"]).default("reject"),
  /** Blank containers kept running for new threads to claim without a cold start. */
  warm: z.number().int().min(0).max(100).default(0),
  startTimeoutMs: z.number().int().positive().default(60_000),
});

export type DockerProviderOptions = z.input<typeof DockerProviderOptions>;
