/**
 * Path escapes against sandboxd's file API: lexical tricks, encodings, and symlinks planted
 * (and swapped) by the sandbox itself. Every case asserts both the answer and that nothing
 * outside the root was read, created, changed or removed.
 */
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, symlink, unlink, writeFile, rename } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
/** A directory outside the root holding a secret; no case may read or change it. */
let outside: string;
const SECRET = "top-secret-outside-the-sandbox";

beforeAll(async () => {
  d = await startSandboxd();
  outside = await mkdtemp(join(tmpdir(), "sandboxd-outside-"));
  await writeFile(join(outside, "secret.txt"), SECRET);
  await writeFile(join(outside, "victim.txt"), "do not delete");
  const ws = join(d.root, "workspace");
  await symlink(join(outside, "secret.txt"), join(ws, "link-to-secret"));
  await symlink(outside, join(ws, "link-to-outside-dir"));
  await symlink(join(outside, "created-through-dangling.txt"), join(ws, "dangling"));
  await symlink("../../../../../../../../../..", join(ws, "link-to-slash-by-dots"));
  await symlink("/", join(ws, "link-to-root"));
});
afterAll(async () => {
  await d?.stop();
  await rm(outside, { recursive: true, force: true });
});

const q = (p: string) => encodeURIComponent(p);
async function code(res: Response): Promise<string> {
  const text = await res.text();
  expect(text).not.toContain(SECRET);
  return res.ok ? "OK" : (JSON.parse(text) as { error: { code: string } }).error.code;
}

async function outsideUntouched(): Promise<void> {
  expect((await readdir(outside)).sort()).toEqual(["secret.txt", "victim.txt"]);
}

describe("lexical escapes are refused before anything is opened", () => {
  const cases: string[] = [
    "../../etc/passwd",
    "..",
    "../..",
    "./../../etc/passwd",
    "a/b/../../../../etc/passwd",
    "/etc/passwd",
    "//etc/passwd",
    "/mnt/user-data/../../etc/passwd",
    "/mnt/user-data/..",
    "/mnt/user-data/workspace/../../../etc/shadow",
    "/mnt/user-data-evil/x",
    "/mnt/user-datax",
    "/mnt/user\u2010data/workspace/x", // a Unicode hyphen that only looks right
    "/proc/self/root/etc/passwd",
    "/",
  ];
  it.each(cases)("read %j → INVALID_ARGUMENT", async (p) => {
    expect(await code(await d.call(`/v1/files?path=${q(p)}`))).toBe("INVALID_ARGUMENT");
  });
  it.each(cases)("write %j → INVALID_ARGUMENT", async (p) => {
    expect(await code(await d.call(`/v1/files?path=${q(p)}`, { method: "PUT", body: "x" }))).toBe(
      "INVALID_ARGUMENT",
    );
  });

  it("refuses a NUL byte", async () => {
    expect(await code(await d.call(`/v1/files?path=${q("a\0/../../etc/passwd")}`))).toBe(
      "INVALID_ARGUMENT",
    );
  });

  it("refuses a very long path and an over-long component", async () => {
    expect(await code(await d.call(`/v1/files?path=${q("a/".repeat(3000))}`))).toBe(
      "INVALID_ARGUMENT",
    );
    expect(await code(await d.call(`/v1/files?path=${q("x".repeat(300))}`))).toBe(
      "INVALID_ARGUMENT",
    );
  });

  it("decodes the query once: an encoded ../ is an escape, a double-encoded one a harmless name", async () => {
    // ..%2F..%2Fetc%2Fpasswd in the URL is ../../etc/passwd once decoded.
    expect(await code(await d.call(`/v1/files?path=..%2F..%2Fetc%2Fpasswd`))).toBe(
      "INVALID_ARGUMENT",
    );
    // %252e%252e decodes to the literal name "%2e%2e": it stays inside the root.
    expect(
      await code(await d.call(`/v1/files?path=%252e%252e%252f%252e%252e%252fetc%252fpasswd`)),
    ).toBe("NOT_FOUND");
    const res = await d.call(`/v1/files?path=${q("%2e%2e/literal.txt")}`, {
      method: "PUT",
      body: "in",
    });
    expect(res.status).toBe(201);
    expect(existsSync(join(d.root, "workspace", "%2e%2e", "literal.txt"))).toBe(true);
  });

  it("treats backslashes as part of a name, not as separators", async () => {
    expect(await code(await d.call(`/v1/files?path=${q("..\\..\\etc\\passwd")}`))).toBe(
      "NOT_FOUND",
    );
  });

  it("refuses a cwd outside the root for commands", async () => {
    for (const cwd of ["/etc", "../..", "/mnt/user-data/../tmp"]) {
      expect(await code(await d.call("/v1/commands/run", json({ command: "true", cwd })))).toBe(
        "INVALID_ARGUMENT",
      );
    }
  });

  it("refuses to write or delete the root itself", async () => {
    expect(
      await code(
        await d.call(`/v1/files?path=${q("/mnt/user-data")}`, { method: "PUT", body: "x" }),
      ),
    ).toBe("INVALID_ARGUMENT");
    expect(
      await code(
        await d.call(`/v1/files?path=${q("/mnt/user-data")}&recursive=true`, { method: "DELETE" }),
      ),
    ).toBe("INVALID_ARGUMENT");
  });
});

describe("symlinks pointing outside are refused when used", () => {
  it.each([
    ["read a file link", "/v1/files?path=link-to-secret"],
    ["read through a directory link", "/v1/files?path=link-to-outside-dir/secret.txt"],
    ["read through a link to / made of dots", "/v1/files?path=link-to-slash-by-dots/etc/passwd"],
    ["read through a link to /", "/v1/files?path=link-to-root/etc/passwd"],
    ["read a directory link with a trailing slash", "/v1/files?path=link-to-outside-dir/"],
    ["list a directory link", "/v1/files/list?path=link-to-outside-dir"],
    ["list through a link to /", "/v1/files/list?path=link-to-root/etc"],
    ["stat through a directory link", "/v1/files/stat?path=link-to-outside-dir/secret.txt"],
  ])("%s → INVALID_ARGUMENT", async (_name, path) => {
    expect(await code(await d.call(path))).toBe("INVALID_ARGUMENT");
  });

  it("a command's cwd through a link is refused", async () => {
    expect(
      await code(
        await d.call(
          "/v1/commands/run",
          json({ command: "cat secret.txt", cwd: "link-to-outside-dir" }),
        ),
      ),
    ).toBe("INVALID_ARGUMENT");
  });

  it("writes through a directory link are refused and create nothing outside", async () => {
    expect(
      await code(
        await d.call(`/v1/files?path=link-to-outside-dir/evil.txt`, { method: "PUT", body: "x" }),
      ),
    ).toBe("INVALID_ARGUMENT");
    expect(
      await code(
        await d.call(`/v1/files?path=link-to-outside-dir/new/deep/evil.txt`, {
          method: "PUT",
          body: "x",
        }),
      ),
    ).toBe("INVALID_ARGUMENT");
    await outsideUntouched();
  });

  it("mkdir through a directory link is refused", async () => {
    expect(
      await code(await d.call("/v1/files/mkdir", json({ path: "link-to-outside-dir/sub" }))),
    ).toBe("INVALID_ARGUMENT");
    await outsideUntouched();
  });

  it("a write to a dangling link replaces the link, never creating its target outside", async () => {
    const res = await d.call(`/v1/files?path=dangling`, { method: "PUT", body: "inside now" });
    expect(res.status).toBe(201);
    await outsideUntouched();
    const st = await d.call(`/v1/files/stat?path=dangling`);
    expect(((await st.json()) as { type: string }).type).toBe("file");
  });

  it("a write to a link to an outside file replaces the link, leaving the file alone", async () => {
    await symlink(join(outside, "victim.txt"), join(d.root, "workspace", "link-to-victim"));
    expect(
      (await d.call(`/v1/files?path=link-to-victim`, { method: "PUT", body: "overwritten?" }))
        .status,
    ).toBe(201);
    const { readFile } = await import("node:fs/promises");
    expect(await readFile(join(outside, "victim.txt"), "utf8")).toBe("do not delete");
  });

  it("deleting through a directory link is refused; deleting the link removes only the link", async () => {
    expect(
      await code(
        await d.call(`/v1/files?path=link-to-outside-dir/victim.txt`, { method: "DELETE" }),
      ),
    ).toBe("INVALID_ARGUMENT");
    await symlink(outside, join(d.root, "workspace", "disposable-link"));
    expect(
      (await d.call(`/v1/files?path=disposable-link&recursive=true`, { method: "DELETE" })).status,
    ).toBe(204);
    await outsideUntouched();
  });

  it("a recursive delete of a directory holding an outside link leaves the outside alone", async () => {
    const dir = join(d.root, "workspace", "holder");
    await mkdir(dir);
    await symlink(outside, join(dir, "inner-link"));
    await writeFile(join(dir, "own.txt"), "mine");
    expect(
      (await d.call(`/v1/files?path=holder&recursive=true`, { method: "DELETE" })).status,
    ).toBe(204);
    expect(existsSync(dir)).toBe(false);
    await outsideUntouched();
  });

  it("a deep listing reports links as links and does not descend into them", async () => {
    const res = await d.call(`/v1/files/list?path=/mnt/user-data&depth=5`);
    const { entries } = (await res.json()) as { entries: { path: string; type: string }[] };
    expect(entries.find((e) => e.path.endsWith("/link-to-outside-dir"))?.type).toBe("symlink");
    expect(entries.some((e) => e.path.includes("link-to-outside-dir/"))).toBe(false);
    expect(entries.some((e) => e.path.includes("link-to-root/"))).toBe(false);
  });
});

describe("a symlink swapped in between check and use loses", () => {
  it("reads never return the outside file while a file and a link are swapped under them", async () => {
    const ws = join(d.root, "workspace");
    await writeFile(join(ws, "race-file"), "harmless");
    await symlink(join(outside, "secret.txt"), join(ws, "race-link"));
    let swapping = true;
    // Swap "race" between a regular file and a link to the secret, as fast as possible.
    const swapper = (async () => {
      for (let i = 0; swapping && i < 200_000; i++) {
        await rename(join(ws, i % 2 ? "race-file" : "race-link"), join(ws, "race")).catch(
          () => undefined,
        );
        await rename(join(ws, "race"), join(ws, i % 2 ? "race-file" : "race-link")).catch(
          () => undefined,
        );
      }
    })();
    const outcomes = new Set<string>();
    const deadline = Date.now() + 8_000;
    for (let i = 0; i < 300 && Date.now() < deadline; i++) {
      const res = await d.call(`/v1/files?path=race`);
      const text = await res.text();
      expect(text).not.toContain(SECRET);
      outcomes.add(res.ok ? text : (JSON.parse(text) as { error: { code: string } }).error.code);
    }
    swapping = false;
    await swapper;
    // The race really happened: reads saw the file, and saw the link refused (or missing).
    expect(outcomes.has("harmless")).toBe(true);
    expect(outcomes.has("INVALID_ARGUMENT")).toBe(true);
    expect(
      [...outcomes].every((o) => ["harmless", "INVALID_ARGUMENT", "NOT_FOUND"].includes(o)),
    ).toBe(true);
  }, 30_000);

  it("writes never land outside while a directory and a link are swapped under them", async () => {
    const ws = join(d.root, "workspace");
    await mkdir(join(ws, "race-dir-real"));
    await symlink(outside, join(ws, "race-dir-link"));
    let swapping = true;
    const swapper = (async () => {
      for (let i = 0; swapping && i < 200_000; i++) {
        await rename(
          join(ws, i % 2 ? "race-dir-real" : "race-dir-link"),
          join(ws, "race-dir"),
        ).catch(() => undefined);
        await rename(
          join(ws, "race-dir"),
          join(ws, i % 2 ? "race-dir-real" : "race-dir-link"),
        ).catch(() => undefined);
      }
    })();
    const deadline = Date.now() + 8_000;
    let written = 0;
    for (let i = 0; i < 300 && Date.now() < deadline; i++) {
      const res = await d.call(`/v1/files?path=race-dir/f${i}.txt`, { method: "PUT", body: "x" });
      if (res.status === 201) written++;
      else
        expect(["INVALID_ARGUMENT", "NOT_FOUND", "CONFLICT"]).toContain(
          ((await res.json()) as { error: { code: string } }).error.code,
        );
    }
    swapping = false;
    await swapper;
    expect(written).toBeGreaterThan(0);
    await outsideUntouched();
    await unlink(join(ws, "race-dir-link")).catch(() => undefined);
  }, 30_000);
});
