/**
 * Where the test cluster keeps its state, and how an image built here gets into its containerd
 * without a registry: `docker save` piped into `ctr images import`, then tagged under a local
 * name (`sandpit.local/<repo>:<tag>`) that pods can use with any pull policy but Always.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export const CLUSTER_STATE =
  process.env.SANDPIT_CLUSTER_STATE ??
  join(
    process.env.XDG_CACHE_HOME ?? join(process.env.HOME ?? "/root", ".cache"),
    "sandpit",
    "cluster-run",
  );

/** `ctr` arguments for the cluster's containerd, Kubernetes namespace. */
export const CTR = [
  "--address",
  join(CLUSTER_STATE, "containerd", "containerd.sock"),
  "-n",
  "k8s.io",
];

/**
 * Makes the Docker image `repo:tag` available in the cluster as `sandpit.local/<name>:<tag>`
 * (importing it only when missing) and returns that name.
 */
export async function loadIntoCluster(
  image: string,
  name: string,
  opts: { dockerHost?: string; log?: (line: string) => void } = {},
): Promise<string> {
  const local = `sandpit.local/${name}:${image.split(":")[1]}`;
  const { stdout } = await run("ctr", [...CTR, "images", "ls", "-q"]);
  if (stdout.split("\n").includes(local)) return local;
  const ctr = `ctr ${CTR.join(" ")}`;
  await run(
    "sh",
    [
      "-c",
      `docker save "$1" | ${ctr} images import - >/dev/null && ` +
        `${ctr} images tag --force "$(${ctr} images ls -q | grep -F "/$1" | head -1)" "$2"`,
      "sh",
      image,
      local,
    ],
    {
      timeout: 300_000,
      ...(opts.dockerHost ? { env: { ...process.env, DOCKER_HOST: opts.dockerHost } } : {}),
    },
  );
  opts.log?.(`imported ${image} as ${local}`);
  return local;
}
