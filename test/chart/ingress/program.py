"""An unchanged E2B program (the official `e2b` package), run by test/chart/ingress.test.ts with
only E2B_DOMAIN and E2B_API_KEY set (and SSL_CERT_FILE, OpenSSL's and rustls' way to trust the
test's CA): every request goes to https://api.<domain> or https://<port>-<id>.<domain>, through
the ingress controller. Prints one JSON object with what it saw; the test judges it."""

import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request

from e2b import Sandbox

HOME = "/home/user"
seen: dict = {}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


sbx = Sandbox.create(timeout=600)
seen["sandboxId"] = sbx.sandbox_id
try:
    r = sbx.commands.run("echo hello from $(uname -s)")
    seen["run"] = {"stdout": r.stdout, "exitCode": r.exit_code}

    sbx.files.write(f"{HOME}/note.txt", "through the ingress")
    seen["read"] = sbx.files.read(f"{HOME}/note.txt")

    big = os.urandom(10 * 1024 * 1024)
    sbx.files.write(f"{HOME}/big.bin", big)
    inside = sbx.commands.run(f"sha256sum {HOME}/big.bin")
    back = bytes(sbx.files.read(f"{HOME}/big.bin", format="bytes"))
    seen["upload"] = {"sent": sha(big), "inside": inside.stdout.split(" ")[0], "back": sha(back)}

    # Output must arrive as it is written, not when the command ends: each line's arrival time.
    started = time.monotonic()
    lines = []
    sbx.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 1; done",
        on_stdout=lambda line: lines.append(
            {"line": line.strip(), "atMs": (time.monotonic() - started) * 1000}
        ),
    )
    seen["stream"] = {"lines": lines, "endedMs": (time.monotonic() - started) * 1000}

    # A server in the sandbox, opened the way a browser opens get_host's URL.
    sbx.files.write(f"{HOME}/site/index.html", "<h1>served from the sandbox</h1>")
    sbx.commands.run(f"python3 -m http.server 8000 --directory {HOME}/site", background=True)
    url = f"https://{sbx.get_host(8000)}/"
    page = None
    for i in range(50):
        if i:
            time.sleep(0.2)
        try:
            with urllib.request.urlopen(url, timeout=5) as res:
                page = {"status": res.status, "body": res.read().decode()}
                break
        except urllib.error.HTTPError as err:
            page = {"status": err.code, "body": err.read().decode()}
    seen["browser"] = {"url": url, **(page or {})}
finally:
    sbx.kill()
seen["runningAfterKill"] = sbx.is_running()
json.dump(seen, sys.stdout)
sys.stdout.write("\n")
