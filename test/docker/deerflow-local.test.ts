/**
 * DeerFlow's Docker mode: its local container backend runs the sandbox image with `docker run`
 * and talks to it with no credential. Here the Sandpit image is started with exactly the
 * arguments that backend builds (LocalContainerBackend._start_container in DeerFlow: seccomp
 * unconfined, a loopback port to 8080, its `environment:` config as `-e`, the thread's
 * directories as bind mounts made 0777 as DeerFlow's Paths.ensure_thread_dirs makes them, skills
 * read-only), with `SANDBOXD_AIO_NO_AUTH=1` set through that `environment:`; then DeerFlow's
 * pinned `agent-sandbox` client runs the whole pytest suite against it.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { closedPort } from "../fakes/net.ts";
import { type SuiteUrls, agentSandboxSuite } from "../deerflow/pytest-suite.ts";

const run = promisify(execFile);
const image = inject("sandboxImage");
const dockerEnv = { ...process.env, DOCKER_HOST: `unix://${inject("dockerSocket")}` };
const docker = (args: string[]) => run("docker", args, { env: dockerEnv, timeout: 120_000 });

const names: string[] = [];
let base: string;
let urls: SuiteUrls;

/** A thread's directories on the host, as DeerFlow lays them out and opens them (0777). */
async function threadDirs(thread: string) {
  const root = join(base, "threads", thread, "user-data");
  const dirs = {
    workspace: join(root, "workspace"),
    uploads: join(root, "uploads"),
    outputs: join(root, "outputs"),
    acp: join(base, "threads", thread, "acp-workspace"),
  };
  for (const d of Object.values(dirs)) {
    await mkdir(d, { recursive: true });
    await chmod(d, 0o777);
  }
  return dirs;
}

/** LocalContainerBackend's `docker run`, argument for argument; returns the sandbox's URL. */
async function startLikeDeerFlow(thread: string, environment: Record<string, string>) {
  const dirs = await threadDirs(thread);
  const port = await closedPort();
  const name = `deer-flow-sandbox-${randomBytes(4).toString("hex")}`;
  const mount = (src: string, dst: string, readOnly: boolean) => [
    "--mount",
    `type=bind,src=${src},dst=${dst}${readOnly ? ",readonly" : ""}`,
  ];
  names.push(name);
  await docker([
    "run",
    "--security-opt",
    "seccomp=unconfined",
    "--rm",
    "-d",
    "-p",
    `127.0.0.1:${port}:8080`,
    "--name",
    name,
    ...Object.entries(environment).flatMap(([k, v]) => ["-e", `${k}=${v}`]),
    ...mount(dirs.workspace, "/mnt/user-data/workspace", false),
    ...mount(dirs.uploads, "/mnt/user-data/uploads", false),
    ...mount(dirs.outputs, "/mnt/user-data/outputs", false),
    ...mount(dirs.acp, "/mnt/acp-workspace", true),
    ...mount(join(base, "skills", "public"), "/mnt/skills/public", true),
    image,
  ]);
  return { name, dirs, url: `http://127.0.0.1:${port}` };
}

/** DeerFlow's wait_for_sandbox_ready: GET /v1/sandbox until it answers 200. */
async function ready(url: string) {
  const deadline = Date.now() + 60_000;
  for (let i = 0; i < 600 && Date.now() < deadline; i++) {
    const ok = await fetch(`${url}/v1/sandbox`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer GET /v1/sandbox within 60 s`);
}

/** An AIO shell command, as DeerFlow's execute_command sends it. */
async function shell(url: string, command: string) {
  const r = await fetch(`${url}/v1/shell/exec`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ command }),
  });
  const body = (await r.json()) as { data?: { output?: string; exit_code?: number } };
  return { status: r.status, output: body.data?.output ?? "", exitCode: body.data?.exit_code };
}

let first: Awaited<ReturnType<typeof startLikeDeerFlow>>;

beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), "sandpit-deerflow-local-"));
  await mkdir(join(base, "skills", "public", "demo"), { recursive: true });
  await writeFile(join(base, "skills", "public", "demo", "SKILL.md"), "use me\n");
  const environment = { SANDBOXD_AIO_NO_AUTH: "1" };
  const [a, b] = await Promise.all([
    startLikeDeerFlow("thread-a", environment),
    startLikeDeerFlow("thread-b", environment),
  ]);
  first = a;
  await Promise.all([ready(a.url), ready(b.url)]);
  urls = { SANDPIT_SANDBOX_URL: a.url, SANDPIT_OTHER_SANDBOX_URL: b.url };
}, 180_000);

afterAll(async () => {
  if (names.length) await docker(["rm", "-f", ...names]).catch(() => undefined);
  if (base) await rm(base, { recursive: true, force: true });
});

describe("the sandbox image as DeerFlow's local container", () => {
  test("the thread's host directories are the sandbox's user data, both ways", async () => {
    await writeFile(join(first.dirs.uploads, "data.csv"), "a,b\n1,2\n");
    const read = await shell(first.url, "cat /mnt/user-data/uploads/data.csv");
    expect(read.output).toBe("a,b\n1,2\n");
    const wrote = await shell(first.url, "echo made-here > /mnt/user-data/outputs/report.md");
    expect(wrote.exitCode).toBe(0);
    expect(await readFile(join(first.dirs.outputs, "report.md"), "utf8")).toBe("made-here\n");
  });

  test("skills and the ACP workspace are read-only, as DeerFlow mounts them", async () => {
    const r = await shell(
      first.url,
      "cat /mnt/skills/public/demo/SKILL.md; touch /mnt/skills/public/x 2>/dev/null && echo wrote || echo refused; touch /mnt/acp-workspace/x 2>/dev/null && echo wrote || echo refused",
    );
    expect(r.output.trim().split("\n")).toEqual(["use me", "refused", "refused"]);
  });

  test("only the AIO routes are open: the native API still wants a token it was never given", async () => {
    const r = await fetch(`${first.url}/v1/files?path=/mnt/user-data/outputs/report.md`);
    expect(r.status).toBe(401);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
  });

  test("without the opt-in, the image refuses to start and says what to set", async () => {
    // In the foreground, so its log is the command's output (DeerFlow's --rm would drop it).
    const r = await docker(["run", "--rm", "--security-opt", "seccomp=unconfined", image]).then(
      () => ({ code: 0, output: "" }),
      (err: { code?: number; stdout?: string; stderr?: string }) => ({
        code: err.code ?? -1,
        output: `${err.stdout ?? ""}${err.stderr ?? ""}`,
      }),
    );
    expect(r.code).not.toBe(0);
    expect(r.output).toContain("SANDBOXD_AIO_NO_AUTH=1");
  });
});

await agentSandboxSuite(
  "agent-sandbox (DeerFlow's pin) against the image in DeerFlow's Docker mode",
  () => urls,
);
