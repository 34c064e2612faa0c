/**
 * Contract: stateful code contexts and rich results (`createCodeContext`, `executeCode(...,
 * {context, onResult, signal})`). A target without the feature ("codeContexts", "richResults")
 * must refuse it with NOT_SUPPORTED.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { CodeContext, CodeResult, SandboxInstance } from "@sandpit/sdk";
import { expectSandboxError, type ContractTarget, type Has } from "./suite.ts";

/** Current releases (Python 3.11 wheels) of what the rich-results test draws with. */
const RICH_PACKAGES = ["pandas==3.1.1", "matplotlib==3.11.2"];
const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

export function codeContextContract(
  target: () => ContractTarget,
  sandbox: () => SandboxInstance,
  has: Has,
): void {
  describe("code contexts", () => {
    if (!has("codeContexts")) {
      it("are refused with NOT_SUPPORTED (the target has no persistent interpreters)", async () => {
        const sbx = sandbox();
        await expectSandboxError(sbx.createCodeContext(), "NOT_SUPPORTED");
        await expectSandboxError(sbx.listCodeContexts(), "NOT_SUPPORTED");
        await expectSandboxError(sbx.removeCodeContext("any"), "NOT_SUPPORTED");
      });
      return;
    }
    /** Runs `body` with a fresh context, removed afterwards whatever happens. */
    async function withContext<T>(
      language: "python" | "typescript",
      body: (ctx: CodeContext, sbx: SandboxInstance) => Promise<T>,
      sbx = sandbox(),
    ): Promise<T> {
      const ctx = await sbx.createCodeContext({ language });
      try {
        return await body(ctx, sbx);
      } finally {
        await sbx.removeCodeContext(ctx);
      }
    }

    it("keeps python variables, imports and functions between cells", async () => {
      await withContext("python", async (ctx, sbx) => {
        expect(ctx).toMatchObject({ language: "python", cwd: "/mnt/user-data/workspace" });
        const first = await sbx.executeCode(
          "import math\nx = 41\ndef f(a):\n    return a + 1\nprint('defined')",
          "python",
          { context: ctx },
        );
        expect(first).toMatchObject({ success: true, stdout: "defined\n", results: [] });
        const r = await sbx.executeCode("f(x) + math.floor(0.5)", "python", { context: ctx });
        expect(r.success).toBe(true);
        expect(r.results).toEqual([expect.objectContaining({ isMainResult: true, text: "42" })]);
        expect(r.durationMs).toBeGreaterThanOrEqual(0);
        // `output` is stdout parsed, as for stateless calls.
        const printed = await sbx.executeCode(
          "import json\nprint(json.dumps({'x': x}))",
          "python",
          {
            context: ctx.id,
          },
        );
        expect(printed.output).toEqual({ x: 41 });
      });
    });

    it("keeps typescript declarations, imports and functions between cells", async () => {
      await withContext("typescript", async (ctx, sbx) => {
        const first = await sbx.executeCode(
          'import { join } from "node:path";\nconst x: number = 41;\nfunction f(a: number): number { return a + 1 }',
          "typescript",
          { context: ctx },
        );
        expect(first.error).toBeUndefined();
        const r = await sbx.executeCode("f(x)", "typescript", { context: ctx });
        expect(r.results).toEqual([expect.objectContaining({ isMainResult: true, text: "42" })]);
        const obj = await sbx.executeCode(
          'const v = await Promise.resolve(join("a", "b"));\n({ joined: v, n: x })',
          "typescript",
          { context: ctx },
        );
        expect(obj.results[0]?.json).toEqual({ joined: "a/b", n: 41 });
        // The top-level-await cell's declaration survives it too.
        const again = await sbx.executeCode("v", "typescript", { context: ctx });
        expect(again.results[0]?.text).toBe("'a/b'");
      });
    });

    it("streams output and returns display() results, then the last value, in order", async () => {
      await withContext("python", async (ctx, sbx) => {
        const seen: CodeResult[] = [];
        let out = "";
        const r = await sbx.executeCode(
          "print('one')\ndisplay('first')\ndisplay({'k': 2})\n3",
          "python",
          { context: ctx, onResult: (x) => seen.push(x), onStdout: (d) => (out += d) },
        );
        expect(r.results.map((x) => [x.isMainResult, x.text])).toEqual([
          [false, "'first'"],
          [false, "{'k': 2}"],
          [true, "3"],
        ]);
        expect(seen).toEqual(r.results);
        expect(out).toBe("one\n");
        expect(r.stdout).toBe("one\n");
      });
    });

    it("reports an exception with name, value and traceback, and the context lives on", async () => {
      await withContext("python", async (ctx, sbx) => {
        await sbx.executeCode("kept = 'yes'", "python", { context: ctx });
        const r = await sbx.executeCode("def g():\n    return 1 / 0\ng()", "python", {
          context: ctx,
        });
        expect(r.success).toBe(false);
        expect(r.error).toMatchObject({ name: "ZeroDivisionError", message: "division by zero" });
        expect(r.error?.traceback).toContain("in g");
        expect(r.error?.traceback).not.toMatch(/\/(tmp|home|root|var)\//);
        const after = await sbx.executeCode("kept", "python", { context: ctx });
        expect(after.results[0]?.text).toBe("'yes'");
      });
      await withContext("typescript", async (ctx, sbx) => {
        await sbx.executeCode("const kept = 'yes';", "typescript", { context: ctx });
        const r = await sbx.executeCode('throw new TypeError("boom")', "typescript", {
          context: ctx,
        });
        expect(r.error).toMatchObject({ name: "TypeError", message: "boom" });
        expect(r.error?.traceback).toContain("TypeError: boom");
        expect(
          (await sbx.executeCode("kept", "typescript", { context: ctx })).results[0]?.text,
        ).toBe("'yes'");
      });
    });

    for (const [language, setup, loop] of [
      ["python", "x = 41", "print('started', flush=True)\nwhile True:\n    pass"],
      ["typescript", "const x = 41;", 'console.log("started");\nwhile (true) {}'],
    ] as const) {
      it(`interrupts a ${language} cell in an endless loop on abort, keeping the context`, async () => {
        await withContext(language, async (ctx, sbx) => {
          await sbx.executeCode(setup, language, { context: ctx });
          const abort = new AbortController();
          const reason = new Error("enough");
          const err = await sbx
            .executeCode(loop, language, {
              context: ctx,
              timeoutMs: 60_000,
              signal: abort.signal,
              onStdout: (d) => d.includes("started") && abort.abort(reason),
            })
            .then(
              () => "resolved",
              (e: unknown) => e,
            );
          expect(err, "rejects with the signal's reason").toBe(reason);
          const r = await sbx.executeCode("x", language, { context: ctx });
          expect(r.results[0]?.text).toBe("41");
        });
      });
    }

    // Stateless abort belongs with the rest of `signal` on executeCode; it is asserted here, on
    // the targets that have contexts, until every provider honours `signal`.
    it("kills a stateless executeCode on abort and rejects with the signal's reason", async () => {
      const sbx = sandbox();
      const beat = `/mnt/user-data/workspace/beat-${randomUUID()}`;
      const abort = new AbortController();
      const reason = new Error("stop it");
      const running = sbx
        .executeCode(
          `import time\ni = 0\nwhile True:\n    i += 1\n    open(${JSON.stringify(beat)}, "w").write(str(i))\n    time.sleep(0.05)`,
          "python",
          { timeoutMs: 60_000, signal: abort.signal },
        )
        .then(
          () => "resolved",
          (e: unknown) => e,
        );
      for (let i = 0; i < 300 && !(await sbx.filesystem.exists(beat)); i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      abort.abort(reason);
      const err = await running;
      expect(err).toBe(reason);
      // The interpreter was killed: the count stops.
      await new Promise((r) => setTimeout(r, 1000));
      const then = await sbx.filesystem.read(beat);
      await new Promise((r) => setTimeout(r, 1000));
      expect(await sbx.filesystem.read(beat)).toBe(then);
    });

    it("interrupts a cell at its timeout with TIMEOUT, keeping the context", async () => {
      await withContext("python", async (ctx, sbx) => {
        await sbx.executeCode("x = 41", "python", { context: ctx });
        await expectSandboxError(
          sbx.executeCode("while True:\n    pass", "python", { context: ctx, timeoutMs: 700 }),
          "TIMEOUT",
        );
        expect((await sbx.executeCode("x", "python", { context: ctx })).results[0]?.text).toBe(
          "41",
        );
      });
    });

    it("keeps contexts apart, lists them and removes them", async () => {
      const sbx = sandbox();
      await withContext("python", async (a) => {
        await withContext("python", async (b) => {
          await sbx.executeCode("only_in_a = 1", "python", { context: a });
          const r = await sbx.executeCode("only_in_a", "python", { context: b });
          expect(r.error?.name).toBe("NameError");
          const ids = (await sbx.listCodeContexts()).map((c) => c.id);
          expect(ids).toEqual(expect.arrayContaining([a.id, b.id]));
        });
        await sbx.removeCodeContext(a.id);
        expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(a.id);
        await expectSandboxError(sbx.executeCode("1", "python", { context: a }), "NOT_FOUND");
        await sbx.removeCodeContext(a); // already gone: still succeeds
      });
    });

    it("reports a crashed interpreter clearly; the context is then gone", async () => {
      const sbx = sandbox();
      const ctx = await sbx.createCodeContext({ language: "python" });
      await expectSandboxError(
        sbx.executeCode("import os\nos._exit(3)", "python", { context: ctx }),
        "EXECUTION_FAILED",
      );
      await expectSandboxError(sbx.executeCode("1", "python", { context: ctx }), "NOT_FOUND");
      expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(ctx.id);
      // The sandbox itself is fine.
      expect((await sbx.executeCode("print(2)", "python")).stdout).toBe("2\n");
    });

    it(
      has("limits")
        ? "refuses more contexts than the sandbox keeps with CAPACITY_EXCEEDED"
        : "keeps many contexts at once, each with its own state (no limit to reach)",
      async () => {
        const sbx = sandbox();
        const made: CodeContext[] = [];
        if (!has("limits")) {
          // No limit the client can know: many contexts at once, each with its own state.
          try {
            for (let i = 0; i < 8; i++) made.push(await sbx.createCodeContext());
            for (const [i, c] of made.entries())
              await sbx.executeCode(`n = ${i}`, "python", { context: c });
            for (const [i, c] of made.entries())
              expect((await sbx.executeCode("n", "python", { context: c })).results[0]?.text).toBe(
                String(i),
              );
          } finally {
            await Promise.all(made.map((c) => sbx.removeCodeContext(c)));
          }
          return;
        }
        try {
          let refused = false;
          for (let i = 0; i < 64 && !refused; i++) {
            try {
              made.push(await sbx.createCodeContext({ language: "python" }));
            } catch (err) {
              await expectSandboxError(Promise.reject(err), "CAPACITY_EXCEEDED");
              refused = true;
            }
          }
          expect(refused, "some limit below 64 contexts").toBe(true);
          expect(made.length).toBeGreaterThan(1);
        } finally {
          await Promise.all(made.map((c) => sbx.removeCodeContext(c)));
        }
        // Room again once they are removed.
        await withContext("python", async () => undefined);
      },
      120_000,
    );

    it("rejects bad input with clear errors", async () => {
      const sbx = sandbox();
      await expectSandboxError(
        sbx.createCodeContext({ language: "cobol" as "python" }),
        "INVALID_ARGUMENT",
      );
      await expectSandboxError(sbx.createCodeContext({ cwd: "/etc" }), "INVALID_ARGUMENT");
      await expectSandboxError(
        sbx.createCodeContext({ cwd: "/mnt/user-data/workspace/no/such/dir" }),
        "NOT_FOUND",
      );
      await expectSandboxError(
        sbx.executeCode("1", "python", { context: randomUUID() }),
        "NOT_FOUND",
      );
      await expectSandboxError(
        sbx.executeCode("1", "python", { context: "../../x" }),
        "INVALID_ARGUMENT",
      );
      await withContext("python", async (ctx) => {
        // A context of another language than asked: nothing runs.
        await expectSandboxError(
          sbx.executeCode("1", "typescript", { context: ctx }),
          "INVALID_ARGUMENT",
        );
        await expectSandboxError(
          sbx.executeCode("1", "python", { context: ctx, cwd: "/mnt/user-data" }),
          "INVALID_ARGUMENT",
        );
        expect((await sbx.executeCode("1 + 1", "python", { context: ctx })).results[0]?.text).toBe(
          "2",
        );
      });
    });

    describe("rich results", () => {
      if (!has("richResults")) {
        it("are refused with NOT_SUPPORTED (the target's interpreter returns text only)", async () => {
          await withContext("python", async (ctx, sbx) => {
            await expectSandboxError(
              sbx.executeCode("1", "python", { context: ctx, onResult: () => undefined }),
              "NOT_SUPPORTED",
            );
          });
        });
        return;
      }
      it("turns a DataFrame into HTML and a table, and a matplotlib figure into a PNG", async () => {
        // pandas and matplotlib are not in the image: one sandbox of its own installs them.
        const sbx = await target().provider.create({
          language: "python",
          threadId: `t${randomUUID().slice(0, 8)}`,
          packages: RICH_PACKAGES,
        });
        try {
          await withContext(
            "python",
            async (ctx) => {
              const df = await sbx.executeCode(
                "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf",
                "python",
                { context: ctx, timeoutMs: 120_000 },
              );
              expect(df.error).toBeUndefined();
              const main = df.results.find((r) => r.isMainResult);
              expect(main?.html).toContain("<table");
              expect(main?.text).toContain("a  b");
              expect(main?.table).toEqual({
                columns: ["a", "b"],
                rows: [
                  [1, "x"],
                  [2, "y"],
                ],
              });

              const fig = await sbx.executeCode(
                "import matplotlib.pyplot as plt\nplt.plot(df['a'], [3, 4])\nplt.title('t')\nlen(df)",
                "python",
                { context: ctx, timeoutMs: 120_000 },
              );
              expect(fig.error).toBeUndefined();
              const png = fig.results.find((r) => r.png);
              expect(png?.isMainResult).toBe(false);
              expect([...Buffer.from(png!.png!, "base64").subarray(0, 8)]).toEqual(PNG_SIGNATURE);
              // The figure comes before the cell's value, which is the variable from before.
              expect(fig.results.at(-1)).toMatchObject({ isMainResult: true, text: "2" });
              // Figures are closed once shown: the next cell draws none.
              const next = await sbx.executeCode("df.shape", "python", { context: ctx });
              expect(next.results).toEqual([
                expect.objectContaining({ isMainResult: true, text: "(2, 2)" }),
              ]);
            },
            sbx,
          );
        } finally {
          await sbx.kill();
        }
      }, 600_000);
    });
  });
}
