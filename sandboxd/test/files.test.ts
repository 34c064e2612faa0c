/** sandboxd's native file routes beyond the basics: move, append, glob, grep, watch, atomic PUT. */
import { request } from "node:http";
import { appendFile, mkdir, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

const W = "/mnt/user-data/workspace";
let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
});
afterAll(async () => {
  await d?.stop();
});

const host = (virtual: string) => join(d.root, virtual.slice("/mnt/user-data".length));
const put = (path: string, body: string) =>
  d.call(`/v1/files?path=${encodeURIComponent(path)}`, { method: "PUT", body });
async function post<T>(route: string, body: unknown, status = 200): Promise<T> {
  const res = await d.call(route, json(body));
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}
const errorCode = (body: unknown) => (body as { error: { code: string } }).error.code;

/** Every staging file left anywhere under the root. */
async function leftovers(): Promise<string[]> {
  const all = await readdir(d.root, { recursive: true });
  return all.filter((p) => p.includes(".sandpit-upload-"));
}

describe("rename", () => {
  it("moves a file, replacing one at the target as rename(2) does", async () => {
    await put(`${W}/mv/a.txt`, "A");
    await put(`${W}/mv/b.txt`, "B");
    expect(await post("/v1/files/rename", { from: "mv/a.txt", to: `${W}/mv/b.txt` })).toEqual({
      from: `${W}/mv/a.txt`,
      to: `${W}/mv/b.txt`,
    });
    expect(await readFile(host(`${W}/mv/b.txt`), "utf8")).toBe("A");
    expect((await d.call(`/v1/files/stat?path=${W}/mv/a.txt`)).status).toBe(404);
  });

  it("moves a directory with its contents, and refuses to move one into itself", async () => {
    await put(`${W}/tree/x/y.txt`, "Y");
    await post("/v1/files/rename", { from: "tree", to: "tree2" });
    expect(await readFile(host(`${W}/tree2/x/y.txt`), "utf8")).toBe("Y");
    const into = await post("/v1/files/rename", { from: "tree2", to: "tree2/x/z" }, 400);
    expect(errorCode(into)).toBe("INVALID_ARGUMENT");
    // The same through a symlink, which only the kernel can see through.
    await symlink(host(`${W}/tree2/x`), host(`${W}/xlink`));
    const viaLink = await post("/v1/files/rename", { from: "tree2", to: "xlink/inner" }, 400);
    expect(errorCode(viaLink)).toBe("INVALID_ARGUMENT");
    expect(await readFile(host(`${W}/tree2/x/y.txt`), "utf8")).toBe("Y");
  });

  it("answers NOT_FOUND, CONFLICT and INVALID_ARGUMENT clearly", async () => {
    await put(`${W}/r/file`, "f");
    await put(`${W}/r/full/inner`, "i");
    await mkdir(host(`${W}/r/empty`));
    const cases: [unknown, number, string][] = [
      [{ from: "r/missing", to: "r/other" }, 404, "NOT_FOUND"],
      [{ from: "r/file", to: "r/no-such-dir/file" }, 404, "NOT_FOUND"],
      [{ from: "r/empty", to: "r/file" }, 409, "CONFLICT"], // a directory over a file
      [{ from: "r/file", to: "r/full" }, 409, "CONFLICT"], // a file over a directory
      [{ from: "r/empty", to: "r/full" }, 409, "CONFLICT"], // over a non-empty directory
      [{ from: "r/file", to: "/etc/passwd" }, 400, "INVALID_ARGUMENT"],
      [{ from: "/mnt/user-data", to: "r/root" }, 400, "INVALID_ARGUMENT"],
      [{ from: "r/file" }, 400, "INVALID_ARGUMENT"],
      [{ from: "r/file", to: "r/x", extra: 1 }, 400, "INVALID_ARGUMENT"],
    ];
    for (const [body, status, code] of cases) {
      expect(errorCode(await post("/v1/files/rename", body, status)), JSON.stringify(body)).toBe(
        code,
      );
    }
    expect(await readFile(host(`${W}/r/file`), "utf8")).toBe("f");
  });
});

describe("append", () => {
  it("creates the file, then appends; refuses a directory", async () => {
    const append = (body: string) =>
      d.call(`/v1/files/append?path=${W}/log/app.log`, { method: "POST", body });
    expect(await (await append("one\n")).json()).toEqual({ path: `${W}/log/app.log`, size: 4 });
    await append("two\n");
    expect(await readFile(host(`${W}/log/app.log`), "utf8")).toBe("one\ntwo\n");
    const dir = await d.call(`/v1/files/append?path=${W}/log`, { method: "POST", body: "x" });
    expect(dir.status).toBe(409);
  });

  it("appends nothing from a stream cut mid-way, and leaves no staging file", async () => {
    await put(`${W}/cut/a.log`, "kept\n");
    await cutUpload("POST", `/v1/files/append?path=${W}/cut/a.log`);
    expect(await readFile(host(`${W}/cut/a.log`), "utf8")).toBe("kept\n");
    expect(await leftovers()).toEqual([]);
  });
});

describe("PUT /v1/files is atomic", () => {
  it("a streamed upload cut mid-way leaves neither a partial file nor a staging file", async () => {
    await cutUpload("PUT", `/v1/files?path=${W}/atomic/new.bin`);
    expect((await d.call(`/v1/files/stat?path=${W}/atomic/new.bin`)).status).toBe(404);
    await put(`${W}/atomic/old.bin`, "old");
    await cutUpload("PUT", `/v1/files?path=${W}/atomic/old.bin`);
    expect(await readFile(host(`${W}/atomic/old.bin`), "utf8")).toBe("old");
    expect(await leftovers()).toEqual([]);
  });
});

/** Sends 8 MiB of a chunked body, then drops the connection, and waits for sandboxd to notice. */
async function cutUpload(method: string, path: string): Promise<void> {
  const url = new URL(d.url + path);
  const req = request({
    host: url.hostname,
    port: url.port,
    path: url.pathname + url.search,
    method,
    headers: { authorization: `Bearer ${d.token}`, "transfer-encoding": "chunked" },
  });
  req.on("error", () => undefined);
  for (let i = 0; i < 8; i++) req.write(Buffer.alloc(1024 * 1024, 0x61));
  await new Promise((r) => setTimeout(r, 300));
  req.destroy();
  // The server sees the reset, fails the pipeline and unlinks its staging file.
  for (let i = 0; i < 50 && (await leftovers()).length > 0; i++)
    await new Promise((r) => setTimeout(r, 100));
}

describe("glob", () => {
  beforeAll(async () => {
    for (const f of ["g/a.py", "g/b.txt", "g/sub/c.py", "g/sub/deep/d.py", "g/.hidden/e.py"])
      await put(`${W}/${f}`, "x");
  });

  it("matches within a directory and across directories with **", async () => {
    const glob = (body: unknown) =>
      post<{ paths: string[]; truncated: boolean }>("/v1/files/glob", body);
    expect(await glob({ pattern: "*.py", cwd: "g" })).toEqual({
      paths: [`${W}/g/a.py`],
      truncated: false,
    });
    expect((await glob({ pattern: "g/**/*.py" })).paths.sort()).toEqual(
      [`${W}/g/.hidden/e.py`, `${W}/g/a.py`, `${W}/g/sub/c.py`, `${W}/g/sub/deep/d.py`].sort(),
    );
    expect((await glob({ pattern: `${W}/g/sub/*` })).paths).toEqual([
      `${W}/g/sub/c.py`,
      `${W}/g/sub/deep`,
    ]);
    expect(await glob({ pattern: "no-such-dir/*.py" })).toEqual({ paths: [], truncated: false });
    const limited = await glob({ pattern: "g/**/*.py", limit: 2 });
    expect(limited).toMatchObject({ truncated: true });
    expect(limited.paths).toHaveLength(2);
  });

  it("refuses patterns outside the root and bad limits", async () => {
    for (const body of [
      { pattern: "/etc/*" },
      { pattern: "" },
      { pattern: "*", limit: 0 },
      { pattern: "*", cwd: "/etc" },
    ])
      expect(errorCode(await post("/v1/files/glob", body, 400)), JSON.stringify(body)).toBe(
        "INVALID_ARGUMENT",
      );
  });
});

describe("grep", () => {
  beforeAll(async () => {
    await put(`${W}/s/one.py`, "import os\nTODO: fix\nprint('a.b')\n");
    await put(`${W}/s/two.txt`, "todo later\nnothing\n");
    await writeFile(host(`${W}/s/bin.dat`), Buffer.from([0x54, 0x4f, 0x44, 0x4f, 0, 1, 2]));
  });
  type Grep = { matches: { path: string; line: number; text: string }[]; truncated: boolean };
  const grep = (body: object) => post<Grep>("/v1/files/grep", { path: "s", ...body });

  it("finds lines by regex, literal, ignoring case, by file glob; skips binary files", async () => {
    expect((await grep({ pattern: "^TODO" })).matches).toEqual([
      { path: `${W}/s/one.py`, line: 2, text: "TODO: fix" },
    ]);
    expect((await grep({ pattern: "todo", ignoreCase: true })).matches.map((m) => m.path)).toEqual([
      `${W}/s/one.py`,
      `${W}/s/two.txt`,
    ]);
    expect((await grep({ pattern: "a.b", literal: true })).matches).toHaveLength(1);
    expect((await grep({ pattern: "a.b" })).matches).toHaveLength(1);
    expect((await grep({ pattern: "o", glob: "*.txt" })).matches.map((m) => m.line)).toEqual([
      1, 2,
    ]);
    const capped = await grep({ pattern: ".", maxMatches: 2 });
    expect(capped.matches).toHaveLength(2);
    expect(capped.truncated).toBe(true);
  });

  it("refuses a bad regular expression and a missing path", async () => {
    expect(errorCode(await post("/v1/files/grep", { pattern: "(" }, 400))).toBe("INVALID_ARGUMENT");
    expect(errorCode(await post("/v1/files/grep", { pattern: "x", path: "nope" }, 404))).toBe(
      "NOT_FOUND",
    );
  });
});

describe("watch", () => {
  type Event = { type: string; path: string };
  async function open(path: string, recursive = false) {
    const abort = new AbortController();
    const res = await d.call(
      `/v1/files/watch?path=${encodeURIComponent(path)}&recursive=${recursive}`,
      {
        signal: abort.signal,
      },
    );
    const events: Event[] = [];
    if (res.ok) {
      void (async () => {
        let buf = "";
        try {
          for await (const chunk of res.body!) {
            buf += Buffer.from(chunk).toString();
            let nl;
            while ((nl = buf.indexOf("\n")) >= 0) {
              events.push(JSON.parse(buf.slice(0, nl)) as Event);
              buf = buf.slice(nl + 1);
            }
          }
        } catch {
          // aborted
        }
      })();
    }
    return { res, events, stop: () => abort.abort() };
  }
  async function until(check: () => boolean, what: string) {
    for (let i = 0; i < 100 && !check(); i++) await new Promise((r) => setTimeout(r, 50));
    expect(check(), what).toBe(true);
  }

  it("reports create, write, rename and remove with virtual paths", async () => {
    await mkdir(host(`${W}/wd`), { recursive: true });
    const w = await open(`${W}/wd`);
    expect(w.res.headers.get("content-type")).toContain("application/x-ndjson");
    await put(`${W}/wd/a.txt`, "1");
    await until(() => w.events.length >= 1, "create");
    await writeFile(host(`${W}/wd/a.txt`), "22");
    await until(() => w.events.length >= 2, "write");
    await post("/v1/files/rename", { from: "wd/a.txt", to: "wd/b.txt" });
    await until(() => w.events.length >= 4, "rename");
    await d.call(`/v1/files?path=${W}/wd/b.txt`, { method: "DELETE" });
    await until(() => w.events.length >= 5, "remove");
    expect(w.events).toEqual([
      { type: "create", path: `${W}/wd/a.txt` },
      { type: "write", path: `${W}/wd/a.txt` },
      { type: "rename", path: `${W}/wd/a.txt` },
      { type: "create", path: `${W}/wd/b.txt` },
      { type: "remove", path: `${W}/wd/b.txt` },
    ]);
    w.stop();
  });

  it("reports a write to a file removed right after it (within one burst window)", async () => {
    await mkdir(host(`${W}/wq`), { recursive: true });
    await writeFile(host(`${W}/wq/q.txt`), "1");
    const w = await open(`${W}/wq`);
    await appendFile(host(`${W}/wq/q.txt`), "more");
    await rm(host(`${W}/wq/q.txt`));
    await until(() => w.events.length >= 2, "write and remove");
    expect(w.events).toEqual([
      { type: "write", path: `${W}/wq/q.txt` },
      { type: "remove", path: `${W}/wq/q.txt` },
    ]);
    w.stop();
  });

  it("reports a write to a file written right after it appeared (within one burst window)", async () => {
    await mkdir(host(`${W}/wn`), { recursive: true });
    const w = await open(`${W}/wn`);
    await put(`${W}/wn/n.txt`, "1");
    await appendFile(host(`${W}/wn/n.txt`), "more");
    await until(() => w.events.length >= 2, "create and write");
    expect(w.events).toEqual([
      { type: "create", path: `${W}/wn/n.txt` },
      { type: "write", path: `${W}/wn/n.txt` },
    ]);
    w.stop();
  });

  it("reports create, write and remove of a file that came and went within one burst window", async () => {
    await mkdir(host(`${W}/wc`), { recursive: true });
    const w = await open(`${W}/wc`);
    await writeFile(host(`${W}/wc/c.txt`), "");
    await appendFile(host(`${W}/wc/c.txt`), "more");
    await rm(host(`${W}/wc/c.txt`));
    await until(() => w.events.length >= 3, "create, write and remove");
    expect(w.events).toEqual([
      { type: "create", path: `${W}/wc/c.txt` },
      { type: "write", path: `${W}/wc/c.txt` },
      { type: "remove", path: `${W}/wc/c.txt` },
    ]);
    w.stop();
  });

  it("sees nested files only when recursive, including in directories made in a burst", async () => {
    await mkdir(host(`${W}/wr`), { recursive: true });
    const flat = await open(`${W}/wr`);
    const deep = await open(`${W}/wr`, true);
    await mkdir(host(`${W}/wr/a/b/c`), { recursive: true });
    for (let i = 0; i < 20; i++) await writeFile(host(`${W}/wr/a/b/c/f${i}`), "x");
    const created = (e: Event[]) =>
      new Set(e.filter((x) => x.type === "create").map((x) => x.path));
    await until(() => created(deep.events).size >= 23, "every nested create");
    expect(created(deep.events)).toContain(`${W}/wr/a/b/c/f19`);
    expect([...created(flat.events)]).toEqual([`${W}/wr/a`]);
    flat.stop();
    deep.stop();
  });

  it("refuses a missing path, a file, and more watches than the limit", async () => {
    expect((await open(`${W}/nope`)).res.status).toBe(404);
    await put(`${W}/wf`, "x");
    expect((await open(`${W}/wf`)).res.status).toBe(409);
    expect((await open(`/etc`)).res.status).toBe(400);
    const held = [];
    for (let i = 0; i < 32; i++) {
      const w = await open(W);
      expect(w.res.status).toBe(200);
      held.push(w);
    }
    const over = await open(W);
    expect(over.res.status).toBe(429);
    held.forEach((w) => w.stop());
    // Slots come back once the clients are gone.
    for (let i = 0; i < 50; i++) {
      const again = await open(W);
      if (again.res.status === 200) {
        again.stop();
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("watch slots were not released");
  });
});
