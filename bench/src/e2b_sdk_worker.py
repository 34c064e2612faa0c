"""The E2B Python SDK's side of bench/src/e2b-sdk.ts: one long-lived process, so the
interpreter's start and the SDK's import are not in any sample.

It reads one command a line on stdin and answers one line on stdout:
  create       Sandbox.create() -> commands.run("true") done, then kill (not timed): the ms
  cell-open    a code interpreter sandbox for the cells (not timed): "ok"
  cell         run_code("1") in it: the ms
  cell-close   kills it: "ok"
A command that fails answers "!" and the error on its line. The target comes from the environment, as an unchanged E2B program gets it (E2B_API_KEY,
E2B_API_URL, E2B_SANDBOX_URL).
"""

import sys
import time

from e2b import Sandbox
from e2b_code_interpreter import Sandbox as CodeInterpreter

interpreter = None


def answer(value) -> None:
    sys.stdout.write(f"{value}\n")
    sys.stdout.flush()


def run(command: str) -> None:
    global interpreter
    if command == "create":
        t0 = time.perf_counter()
        sandbox = Sandbox.create()
        sandbox.commands.run("true")
        ms = (time.perf_counter() - t0) * 1000
        sandbox.kill()
        answer(ms)
    elif command == "cell-open":
        interpreter = CodeInterpreter.create(timeout=1800)
        answer("ok")
    elif command == "cell":
        t0 = time.perf_counter()
        execution = interpreter.run_code("1")
        ms = (time.perf_counter() - t0) * 1000
        if execution.text != "1":
            raise SystemExit(f'run_code("1") gave {execution.text!r}')
        answer(ms)
    elif command == "cell-close":
        interpreter.kill()
        answer("ok")
    else:
        raise SystemExit(f"unknown command {command!r}")


for line in sys.stdin:
    try:
        run(line.strip())
    except Exception as err:  # one failed sample, said on its line; the worker goes on
        answer("!" + f"{type(err).__name__}: {err}".replace("\n", " "))
