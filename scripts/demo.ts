/**
 * The local Sandpit demo: one sandbox on this machine, Python and TypeScript run in it, a file
 * written and read back, with no cluster: `npm run demo`.
 */
import { createProvider, LocalProvider, SandboxError } from "@sandpit/sdk";

const step = (text: string) => process.stdout.write(`• ${text}… `);
const done = (text = "done") => process.stdout.write(`${text}\n`);

async function main(): Promise<void> {
  const provider = createProvider({ use: "local", local: { isolation: "auto" } });
  step("creating a sandbox (local provider)");
  const started = performance.now();
  const sbx = await provider.create({ language: "python", threadId: `demo-${process.pid}` });
  const isolation = (provider as LocalProvider).isolation;
  done(
    `${sbx.sandboxId} in ${Math.round(performance.now() - started)} ms, isolation: ${isolation === "bwrap" ? "bubblewrap namespaces" : "none (install bubblewrap for namespaces)"}`,
  );

  try {
    step("running Python");
    const py = await sbx.executeCode(
      'import json, platform\nprint(json.dumps({"python": platform.python_version(), "squares": [i * i for i in range(5)]}))',
      "python",
    );
    done(JSON.stringify(py.output));

    step("running TypeScript");
    const ts = await sbx.executeCode(
      'type Greeting = { hello: string; node: string };\nconst g: Greeting = { hello: "from TypeScript", node: process.version };\nconsole.log(JSON.stringify(g));',
      "typescript",
    );
    done(JSON.stringify(ts.output));

    step("writing and reading /mnt/user-data/outputs/report.txt");
    await sbx.filesystem.write(
      "/mnt/user-data/outputs/report.txt",
      `written by the demo at ${new Date().toISOString()}\n`,
    );
    const back = await sbx.commands.run(
      "wc -c < /mnt/user-data/outputs/report.txt && cat /mnt/user-data/outputs/report.txt",
    );
    done(back.stdout.trim().replace("\n", " bytes: "));

    step("an exception, reported as data");
    const err = await sbx.executeCode("1 / 0", "python");
    done(`${err.error?.name}: ${err.error?.message}`);
  } finally {
    await sbx.kill();
    await provider.close();
  }
  console.log(
    "\nAll good. Next: `npm test` runs every suite; see README.md for the SDK and providers.",
  );
}

main().catch((err: unknown) => {
  const code = err instanceof SandboxError ? ` [${err.code}]` : "";
  console.error(`\nThe demo failed${code}: ${(err as Error).message}`);
  process.exit(1);
});
