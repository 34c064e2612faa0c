"""llm-sandbox side of bench/src/docker.ts: create -> first run("print(1)") with its Docker backend.

Driven over stdin/stdout by docker.ts so its runs interleave with ours: each line "run <name>" on
stdin makes one session named <name> (open + run("print(1)"), timed; then close, untimed) and
answers one JSON line on stdout; "quit" ends. Progress and errors go to stderr.

It uses the local image as is and never pulls (llm-sandbox only pulls when images.get() fails,
and the image is checked first). Our image needs three options, all passed per session, none
changing the image:
  - its entrypoint is sandboxd, which exits without SANDBOXD_TOKEN, so the container would stop
    at once: entrypoint "tini -- sleep infinity" keeps it up (tini so stop() is not a 10 s wait);
  - it has no ensurepip (venv cannot be created) and no network use is wanted, so
    skip_environment_setup=True (no venv, no `pip install --upgrade pip`);
  - it has `python3` but no `python`, which llm-sandbox then runs ("python {file}"): a host
    directory holding only a `python -> /usr/bin/python3` symlink is bind-mounted read-only and
    put first on PATH.

    bench/src/llm-sandbox/.venv/bin/python bench/src/llm-sandbox/bench.py --image sandpit-sandbox:latest
"""

import argparse
import json
import os
import sys
import tempfile
import time

import docker
from llm_sandbox import SandboxBackend, SandboxSession
from importlib.metadata import version

SHIM_MOUNT = "/opt/llm-sandbox-shim"
PATH = f"{SHIM_MOUNT}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def log(msg: str) -> None:
    sys.stderr.write(f"[llm-sandbox] {msg}\n")
    sys.stderr.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--label", default="sandpit.dev/bench=llm-sandbox")
    args = ap.parse_args()

    client = docker.from_env()
    client.images.get(args.image)  # raises ImageNotFound rather than letting a session pull
    label_key, label_value = args.label.split("=", 1)

    with tempfile.TemporaryDirectory(prefix="llm-sandbox-shim-") as shim:
        os.chmod(shim, 0o755)
        os.symlink("/usr/bin/python3", os.path.join(shim, "python"))

        def one(name: str) -> dict:
            session = SandboxSession(
                backend=SandboxBackend.DOCKER,
                client=client,
                image=args.image,
                lang="python",
                keep_template=True,
                skip_environment_setup=True,
                runtime_configs={
                    "name": name,
                    "labels": {label_key: label_value},
                    "entrypoint": ["/usr/bin/tini", "--", "sleep", "infinity"],
                    "environment": {"PATH": PATH},
                    "volumes": {shim: {"bind": SHIM_MOUNT, "mode": "ro"}},
                },
            )
            t0 = time.perf_counter()
            try:
                session.open()
                t1 = time.perf_counter()
                out = session.run("print(1)")
                t2 = time.perf_counter()
                if out.exit_code != 0 or out.stdout.strip() != "1":
                    raise RuntimeError(
                        f"print(1) gave exit {out.exit_code}, stdout {out.stdout!r}, stderr {out.stderr!r}"
                    )
                return {"ms": (t2 - t0) * 1000, "openMs": (t1 - t0) * 1000, "runMs": (t2 - t1) * 1000}
            finally:
                t3 = time.perf_counter()
                session.close()
                log(f"{name}: closed in {(time.perf_counter() - t3) * 1000:.0f} ms")

        print(json.dumps({"ready": True, "version": version("llm-sandbox"), "docker": version("docker")}), flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd:
                continue
            if cmd[0] == "quit":
                break
            if cmd[0] == "run" and len(cmd) == 2:
                try:
                    print(json.dumps(one(cmd[1])), flush=True)
                except Exception as err:  # reported to docker.ts, which fails the section
                    print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
