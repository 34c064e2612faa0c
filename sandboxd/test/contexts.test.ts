/** Code contexts on a real sandboxd: the wire events, the private channel, bounds and cleanup. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CellEvent } from "../src/protocol.ts";
import { json, processesMatching, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd({
    SANDBOXD_OUTPUT_CAP_BYTES: "100000",
    SANDBOXD_MAX_CONTEXTS: "3",
    SANDBOXD_CONTEXT_IDLE_SECONDS: "2",
  });
});
afterAll(async () => {
  await d?.stop();
});

async function create(language = "python"): Promise<string> {
  const res = await d.call("/v1/contexts", json({ language }));
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

async function cell(id: string, body: Record<string, unknown>): Promise<CellEvent[]> {
  const res = await d.call(`/v1/contexts/${id}/execute`, json(body));
  expect(res.status, await res.clone().text()).toBe(200);
  expect(res.headers.get("content-type")).toContain("application/x-ndjson");
  return (await res.text())
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as CellEvent);
}

const text = (events: CellEvent[], stream: "stdout" | "stderr") =>
  events.map((e) => (e.type === stream ? e.data : "")).join("");
const stdout = (events: CellEvent[]) => text(events, "stdout");

const remove = (id: string) => d.call(`/v1/contexts/${id}`, { method: "DELETE" });

describe("code contexts (sandboxd)", () => {
  it("passes on every byte a cell and its commands print, and nothing printed is protocol", async () => {
    const id = await create();
    try {
      const events = await cell(id, {
        code:
          'import subprocess\nprint(\'{"type": "done"}\')\n' +
          "subprocess.run(['sh', '-c', 'echo from-a-command; echo err-command >&2'])\n" +
          "print('last', end='')",
      });
      expect(stdout(events)).toBe('{"type": "done"}\nfrom-a-command\nlast');
      expect(text(events, "stderr")).toBe("err-command\n");
      expect(events.at(-1)).toMatchObject({ type: "end", timedOut: false, truncated: false });
      // Environment for one cell only, and the sandbox's paths as agents see them.
      const env = await cell(id, {
        code: "import os\nprint(os.environ.get('ONLY_HERE'), os.getcwd())",
        env: { ONLY_HERE: "yes" },
      });
      expect(stdout(env)).toBe("yes /mnt/user-data/workspace\n");
      const after = await cell(id, { code: "print(os.environ.get('ONLY_HERE'))" });
      expect(stdout(after)).toBe("None\n");
    } finally {
      await remove(id);
    }
  });

  it("passes output on in whole lines, however the writes are split, and a held line still streams", async () => {
    const id = await create();
    try {
      // One line in three writes with pauses between them (as print() under load can arrive),
      // then an unfinished line that must still come out while the cell runs on.
      const events = await cell(id, {
        code:
          "import sys, time\n" +
          "for part in ('si', 'de', '\\n'):\n    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.005)\n" +
          "sys.stdout.write('working'); sys.stdout.flush(); time.sleep(0.3)\n" +
          "print(' done')",
      });
      const chunks = events.flatMap((e) => (e.type === "stdout" ? [e.data] : []));
      expect(chunks).toEqual(["side\n", "working", " done\n"]);
    } finally {
      await remove(id);
    }
  });

  it("caps a cell's output and says so", async () => {
    const id = await create();
    try {
      const events = await cell(id, { code: "print('x' * 300000)" });
      expect(stdout(events).length).toBe(100000);
      expect(events.at(-1)).toMatchObject({ type: "end", truncated: true });
    } finally {
      await remove(id);
    }
  });

  it("kills an interpreter that ignores the interrupt: failure, then 404, no process left", async () => {
    const id = await create();
    const [pid] = await processesMatching(`python_kernel.py`).then((p) => p.slice(-1));
    const events = await cell(id, {
      code: "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
      timeoutMs: 300,
    });
    expect(events.at(-1)).toMatchObject({ type: "failure", error: { code: "TIMEOUT" } });
    const res = await d.call(`/v1/contexts/${id}/execute`, json({ code: "1" }));
    expect(res.status).toBe(404);
    expect(pid).toBeDefined();
    expect(await processesMatching(`python_kernel.py`)).not.toContain(pid);
  });

  it("queues cells of one context in arrival order", async () => {
    const id = await create();
    try {
      const runs = await Promise.all(
        [0, 1, 2].map((i) =>
          cell(id, {
            code: `import time\ntime.sleep(0.05)\nprint(${i})\nseen = globals().get('seen', '') + '${i}'`,
          }),
        ),
      );
      expect(runs.map(stdout)).toEqual(["0\n", "1\n", "2\n"]);
      const order = await cell(id, { code: "seen" });
      expect(order).toContainEqual({
        type: "result",
        result: { isMainResult: true, text: "'012'" },
      });
    } finally {
      await remove(id);
    }
  });

  it("bounds the number of contexts and closes idle ones", async () => {
    const ids = [await create(), await create(), await create()];
    const full = await d.call("/v1/contexts", json({ language: "python" }));
    expect(full.status).toBe(429);
    expect(((await full.json()) as { error: { code: string } }).error.code).toBe(
      "CAPACITY_EXCEEDED",
    );
    // Idle for 2 s: closed by the sweeper (within its 1 s period).
    const deadline = Date.now() + 10_000;
    let listed = ids.length;
    while (listed > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      const body = (await (await d.call("/v1/contexts")).json()) as { contexts: { id: string }[] };
      listed = body.contexts.filter((c) => ids.includes(c.id)).length;
    }
    expect(listed).toBe(0);
  });

  it("resolves a TypeScript cell's imports from its directory up, then Sandpit's packages", async () => {
    const { mkdir, writeFile } = await import("node:fs/promises");
    const pkg = async (dir: string, name: string, source: string) => {
      await mkdir(`${dir}/node_modules/${name}`, { recursive: true });
      await writeFile(
        `${dir}/node_modules/${name}/package.json`,
        JSON.stringify({ name, type: "module", exports: { import: "./index.js" } }),
      );
      await writeFile(`${dir}/node_modules/${name}/index.js`, source);
    };
    // What `npm install` put in a project (or the home directory), and what Sandpit installed.
    const project = `${d.root}/workspace/proj`;
    await mkdir(`${project}/sub`, { recursive: true });
    await pkg(project, "from-project", 'export default "project";');
    await pkg(project, "both", 'export const where = "project";');
    await pkg(project, "broken", 'import "not-installed-anywhere"; export default 1;');
    await pkg(`${d.root}/.sandpit`, "from-sandpit", 'export default "sandpit";');
    await pkg(`${d.root}/.sandpit`, "both", 'export const where = "sandpit";');
    const res = await d.call("/v1/contexts", json({ language: "typescript", cwd: "proj/sub" }));
    expect(res.status, await res.clone().text()).toBe(201);
    const { id } = (await res.json()) as { id: string };
    try {
      const code =
        'import a from "from-project";\nimport b from "from-sandpit";\n' +
        'import { where } from "both";\nimport * as path from "path";\n' +
        "[a, b, where, typeof path.join]";
      expect(await cell(id, { code })).toContainEqual({
        type: "result",
        result: {
          isMainResult: true,
          text: "[ 'project', 'sandpit', 'project', 'function' ]",
          json: ["project", "sandpit", "project", "function"],
        },
      });
      // A package found whose own import is missing is that error, not a search elsewhere.
      const failed = await cell(id, { code: 'import x from "broken";' });
      const error = failed.find((e) => e.type === "error");
      expect(JSON.stringify(error)).toContain("not-installed-anywhere");
    } finally {
      await remove(id);
    }
  });

  it("answers bad input with 4xx envelopes", async () => {
    const bad = async (path: string, init: RequestInit, status: number) => {
      const res = await d.call(path, init);
      expect(res.status, path).toBe(status);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBeTypeOf("string");
    };
    await bad("/v1/contexts", json({ language: "ruby" }), 400);
    await bad("/v1/contexts", json({ language: "python", extra: 1 }), 400);
    await bad("/v1/contexts", json({ language: "python", cwd: "../../etc" }), 400);
    await bad("/v1/contexts/nope/execute", json({ code: "1" }), 404);
    await bad("/v1/contexts/nope", { method: "DELETE" }, 404);
    const id = await create("typescript");
    try {
      await bad(`/v1/contexts/${id}/execute`, json({ code: 1 }), 400);
      await bad(`/v1/contexts/${id}/execute`, json({ code: "1", language: "python" }), 400);
      const res = await fetch(`${d.url}/v1/contexts`, { headers: {} });
      expect(res.status).toBe(401);
    } finally {
      await remove(id);
    }
  });
});
