/**
 * A file's bytes as the body of an answer whose Content-Length is the size the file had when it
 * was opened. A file can grow while it is read (a command appending to it as it runs): the body
 * is then exactly that many bytes, never more, or the extra bytes would be read by the client as
 * the start of its next answer on the connection (a proxy in between fails both). A file that
 * shrank meanwhile cannot fill its Content-Length: the answer is cut, so the client sees an
 * incomplete body rather than waiting for bytes that will never come.
 */
import type { FileHandle } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import type { Logger } from "./log.ts";

/** Files up to this size are read in one go; bigger ones are streamed. */
const SMALL_FILE_BYTES = 4 * 1024 * 1024;

/** The first `size` bytes of the file, or fewer when it has fewer now. */
export async function readPrefix(fh: FileHandle, size: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(size);
  let got = 0;
  while (got < size) {
    const { bytesRead } = await fh.read(buf, got, size - got, got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  return got === size ? buf : buf.subarray(0, got);
}

/** Answers with the first `size` bytes of `fh` (its size when opened) and closes it. */
export async function sendFileBody(
  res: ServerResponse,
  fh: FileHandle,
  size: number,
  logger: Logger,
  path: string,
): Promise<void> {
  res.setHeader("Content-Length", String(size));
  if (size <= SMALL_FILE_BYTES) {
    // One read and one write for small files; streams cost more than they save here.
    let body: Buffer;
    try {
      body = await readPrefix(fh, size);
    } finally {
      await fh.close();
    }
    if (body.length < size) return void res.destroy(new Error(`${path} shrank while read`));
    res.end(body);
    return;
  }
  // 1 MiB reads: fewer thread-pool round trips than the 64 KiB default (measured in bench/).
  const stream = fh.createReadStream({ highWaterMark: 1024 * 1024, start: 0, end: size - 1 });
  let sent = 0;
  stream.on("data", (chunk: string | Buffer) => {
    sent += chunk.length;
  });
  stream.on("error", (err) => {
    logger.warn({ err, path }, "file read failed mid-stream");
    res.destroy(err);
  });
  stream.on("end", () => {
    if (sent < size) res.destroy(new Error(`${path} shrank while read`));
  });
  stream.pipe(res);
}
