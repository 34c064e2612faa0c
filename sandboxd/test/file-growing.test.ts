/**
 * A file that grows while it is read (a command appending to it as it runs) is answered with
 * exactly the Content-Length the answer announced. Found by test/security/load.test.ts: reading
 * a file 20 commands were appending to sent more bytes than announced, which the client read as
 * the start of its next answer on the connection, and the provisioner's proxy cut the answer
 * (the SDK saw ECONNRESET).
 */
import { appendFile, open, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { readPrefix } from "../src/file-body.ts";
import { startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd();
});
afterAll(async () => {
  await d?.stop();
});

test("a small file read after it grew gives the bytes it had when opened", async () => {
  const path = join(d.root, "small-growing.txt");
  await writeFile(path, "0123456789");
  const fh = await open(path, "r");
  try {
    const { size } = await fh.stat();
    await appendFile(path, "more, written after the open");
    expect((await readPrefix(fh, size)).toString()).toBe("0123456789");
  } finally {
    await fh.close();
  }
});

test("a streamed file that grows mid-answer: the body is its Content-Length, the connection stays good", async () => {
  const path = join(d.root, "large-growing.bin");
  const size = 6 * 1024 * 1024;
  await writeFile(path, Buffer.alloc(size, 0x61));
  const url = new URL(`${d.url}/v1/files?path=/mnt/user-data/large-growing.bin`);
  // One raw socket for two requests, as a keep-alive client (the provisioner's pool) uses it.
  const { connect } = await import("node:net");
  const socket = connect(Number(url.port), url.hostname);
  await new Promise((r) => socket.once("connect", r));
  const ask = (p: string) =>
    socket.write(
      `GET ${p} HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${d.token}\r\n\r\n`,
    );
  ask(`${url.pathname}${url.search}`);
  // Take the head, then hold the body back while the file grows by 2 MiB.
  let buffered = Buffer.alloc(0);
  await new Promise<void>((resolve) => {
    const onData = (c: Buffer) => {
      buffered = Buffer.concat([buffered, c]);
      if (buffered.includes("\r\n\r\n")) {
        socket.off("data", onData);
        socket.pause();
        resolve();
      }
    };
    socket.on("data", onData);
  });
  const headEnd = buffered.indexOf("\r\n\r\n") + 4;
  const head = buffered.subarray(0, headEnd).toString();
  expect(head).toMatch(/^HTTP\/1\.1 200/);
  expect(Number(/content-length: (\d+)/i.exec(head)?.[1])).toBe(size);
  await appendFile(path, Buffer.alloc(2 * 1024 * 1024, 0x62));
  // The rest of the body, then a second request on the same connection.
  let rest = buffered.subarray(headEnd);
  socket.on("data", (c: Buffer) => (rest = Buffer.concat([rest, c])));
  socket.resume();
  const second = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no second answer")), 20_000);
    const check = setInterval(() => {
      if (rest.length < size) return;
      const after = rest.subarray(size).toString("latin1");
      if (/\r\n\r\n/.test(after)) {
        clearInterval(check);
        clearTimeout(timer);
        resolve(after);
      }
    }, 20);
  });
  await new Promise((r) => setTimeout(r, 200));
  ask("/healthz");
  const next = await second;
  socket.destroy();
  expect(rest.subarray(0, size).every((b) => b === 0x61)).toBe(true);
  // What follows the body is the next answer's head, not more of the file.
  expect(next).toMatch(/^HTTP\/1\.1 200/);
});
