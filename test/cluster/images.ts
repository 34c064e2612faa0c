/**
 * Where the test cluster keeps its state, and how the images built here get into its containerd
 * without a registry: `docker save` piped into `ctr images import`, then tagged under a local
 * name (`sandpit.local/<name>:<tag>`) that pods can use with any pull policy but Always.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import Docker from "dockerode";
import { ensureServiceImage } from "@sandpit/images/service";
import { ensureDocker } from "../docker/dockerd.ts";
import { ensureTestImage } from "../docker/test-image.ts";

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

/** The cluster-local names of Sandpit's images. */
export interface ClusterImages {
  sandbox: string;
  operator: string;
  provisioner: string;
  egress: string;
}

/**
 * Builds (or finds) the sandbox, operator, provisioner and egress proxy images for the current sources and
 * makes them available in the cluster. Docker is started for this when no engine runs, and
 * stopped again after.
 */
export async function ensureClusterImages(
  opts: { log?: (line: string) => void } = {},
): Promise<ClusterImages> {
  const engine = await ensureDocker(opts);
  try {
    const docker = new Docker({ socketPath: engine.socketPath });
    const load = { dockerHost: `unix://${engine.socketPath}`, ...opts };
    const sandbox = await ensureTestImage({ docker, ...opts });
    const operator = await ensureServiceImage("operator", { docker, ...opts });
    const provisioner = await ensureServiceImage("provisioner", { docker, ...opts });
    const egress = await ensureServiceImage("egress", { docker, ...opts });
    return {
      sandbox: await loadIntoCluster(sandbox.tag, "sandbox", load),
      operator: await loadIntoCluster(operator.tag, "operator", load),
      provisioner: await loadIntoCluster(provisioner.tag, "provisioner", load),
      egress: await loadIntoCluster(egress.tag, "egress", load),
    };
  } finally {
    await engine.stop();
  }
}

/**
 * The chart's `images.<name>.repository` and `.tag` values for these images, as helm arguments.
 * As strings: a content-hash tag may be all digits (one in about 280), which `--set` would pass
 * as a number and the values schema refuse.
 */
export function chartImageArgs(images: ClusterImages): string[] {
  return Object.entries(images).flatMap(([name, image]: [string, string]) => {
    const at = image.lastIndexOf(":");
    return [
      "--set-string",
      `images.${name}.repository=${image.slice(0, at)}`,
      "--set-string",
      `images.${name}.tag=${image.slice(at + 1)}`,
    ];
  });
}
