"""Run on a host by `linkgrad deploy` with the host's python3 (standard library only): linkgrad
installed into its own venv from the wheelhouse copied beside it, never from an index.

    python3 install_on_host.py VENV WHEELS LINKGRAD_WHEEL MANIFEST_JSON INJECTOR(yes|no)

WHEELS holds the dependencies (pip's find-links); LINKGRAD_WHEEL is given by its path, since
every checkout's wheel has the same name.

One deploy at a time per venv (a lock beside it: hosts that share a file system, as a
testbed's do, install once). The manifest is written last, so an install cut short is redone
by the next deploy. Prints one JSON line: {"result": "installed"|"present", "seconds": S} or
{"error": "..."} with exit status 1.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MANIFEST = "linkgrad-deploy.json"  # what is installed, written when all of it is
MADE = "linkgrad-deploy.made"  # this venv is deploy's own, from its creation on


def _run(argv: list[str], what: str) -> None:
    # the host's pip configuration plays no part (an index, constraints): the wheelhouse is all
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"{what} exited {done.returncode}: {tail}")


def install(venv: Path, wheels: Path, own: Path, manifest: str, injector: bool) -> str:
    python = venv / "bin" / "python"
    if (venv / MANIFEST).is_file() and (venv / MANIFEST).read_text() == manifest:
        return "present"
    if venv.exists() and not (venv / MADE).exists() and any(venv.iterdir()):
        raise RuntimeError(f"{venv} is there and deploy did not make it (no {MADE} in "
                           "it): it installs only into a venv of its own, new or empty")
    (venv / MANIFEST).unlink(missing_ok=True)  # an install cut short from here is redone
    if not (venv / MADE).exists():
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python3 -m venv")
        (venv / MADE).write_text("made by linkgrad deploy\n")
    pip_wheels = sorted(wheels.glob("pip-*.whl"))
    if not own.is_file() or not pip_wheels:
        raise RuntimeError(f"{own} or pip's wheel in {wheels} is missing")
    find = ["--no-index", "--find-links", str(wheels), "--quiet"]
    # pip runs from its own wheel to install itself: the host's python3 may have no ensurepip
    _run([str(python), f"{pip_wheels[-1]}/pip", "install", *find, "--upgrade",
          str(pip_wheels[-1])], "installing pip")
    wanted = f"{own}[injector]" if injector else str(own)
    _run([str(python), "-m", "pip", "install", *find, wanted], "installing linkgrad's "
         "dependencies" + (" (and building netfilterqueue)" if injector else ""))
    # the same version number may hold other code: replaced whatever pip thinks of it
    _run([str(python), "-m", "pip", "install", *find, "--no-deps", "--force-reinstall",
          str(own)], "installing linkgrad")
    check = "import linkgrad, sniffer, injector" + (", netfilterqueue" if injector else "")
    _run([str(python), "-c", check], "importing linkgrad")
    part = venv / f"{MANIFEST}.part"
    part.write_text(manifest)
    os.replace(part, venv / MANIFEST)
    return "installed"


def main(argv: list[str]) -> int:
    venv, wheels, own = Path(argv[0]), Path(argv[1]), Path(argv[2])
    manifest, injector = argv[3], argv[4] == "yes"
    started = time.monotonic()
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(f"{venv}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = install(venv, wheels, own, manifest, injector)
    except (RuntimeError, OSError) as e:
        print(json.dumps({"error": str(e)}))
        return 1
    print(json.dumps({"result": result, "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
