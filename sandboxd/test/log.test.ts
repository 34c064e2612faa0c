/** sandboxd's logger writes the records pino wrote, field for field (the time aside). */
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { createLogger, type LevelName } from "../src/log.ts";

function both(level: LevelName, log: (l: ReturnType<typeof createLogger>) => void) {
  const ours: string[] = [];
  const theirs: string[] = [];
  log(createLogger(level, (line) => ours.push(line)));
  log(pino({ level }, { write: (line: string) => void theirs.push(line) }));
  const parse = (lines: string[]) =>
    lines.map((l) => {
      expect(l.endsWith("\n")).toBe(true);
      const { time, ...rest } = JSON.parse(l) as { time: number };
      expect(Math.abs(time - Date.now())).toBeLessThan(60_000);
      return rest;
    });
  return { ours: parse(ours), theirs: parse(theirs), raw: ours };
}

describe("createLogger", () => {
  it("writes pino's records: level, pid, hostname, fields, msg", () => {
    const { ours, theirs, raw } = both("info", (l) => {
      l.info({ why: "SIGTERM" }, "stopping");
      l.warn({ path: "/x", n: 1, nested: { a: [1, "b"] } }, "file read failed mid-stream");
      l.debug({ port: 1 }, "below the level");
      l.error({}, "no fields");
    });
    expect(ours).toEqual(theirs);
    expect(ours).toHaveLength(3);
    // Key order too: what greps the lines sees the same text.
    expect(Object.keys(JSON.parse(raw[0]!) as object)).toEqual([
      "level",
      "time",
      "pid",
      "hostname",
      "why",
      "msg",
    ]);
  });

  it("serialises an err field as pino does, causes and own fields included", () => {
    const cause = Object.assign(new Error("inner"), { code: "EINNER" });
    const err = Object.assign(new TypeError("outer", { cause }), { code: "EOUTER", errno: -2 });
    const agg = new AggregateError([new Error("one"), new RangeError("two")], "many");
    const { ours, theirs } = both("trace", (l) => {
      l.error({ err, path: "/v1/x" }, "request failed");
      l.fatal({ err: agg }, "sandboxd failed to start");
      l.trace({ err: { message: "error-like", extra: 1 } }, "not an Error");
      l.debug({ err: "a string" }, "not error-like");
    });
    expect(ours).toEqual(theirs);
    expect(ours[0]).toMatchObject({
      level: 50,
      err: { type: "TypeError", message: "outer: inner", code: "EOUTER" },
    });
    expect((ours[0] as { err: { stack: string } }).err.stack).toContain(
      "\ncaused by: Error: inner",
    );
  });

  it("writes nothing when silent", () => {
    const { ours } = both("silent", (l) => l.fatal({}, "x"));
    expect(ours).toEqual([]);
  });
});
