/** Network helpers for tests. */
import { createServer } from "node:net";

/** A 127.0.0.1 port with nothing listening on it (bound, read, released). */
export async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
