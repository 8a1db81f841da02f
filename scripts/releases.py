"""The releases this server has had (`RELEASES`) and a runnable copy of one, for `make upgrade-check`.

`RELEASES`, at the repository's root: one line per release, oldest first, `<full commit hash> <name>`; `#`
starts a comment. A release is cut by adding its line (docs/operations.md, "Upgrades without downtime").
Commits, not tags: a clone carries every commit of main, not always its tags.

    .venv/bin/python -m scripts.releases previous          # the release the upgrade check runs beside HEAD
    .venv/bin/python -m scripts.releases prepare [COMMIT]  # its code and venv under .cache/releases/<commit>/

`previous` is the newest release whose code is not HEAD's (RELEASES aside), so right after a release is cut
the check still runs the one before it. A prepared release is `.cache/releases/<commit>/`: `src` (the commit's
tree, `git archive`), `venv` (the release's own dependencies from its own pyproject.toml, installed by pip
from the index pip is set up with, as `make .venv/.installed` does; the code editable, so it finds its
migrations and alembic.ini beside it) and `.ready`. It is made once (about half a minute) and reused;
RELEASE_CACHE_DIR moves the folder. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES_FILE = ROOT / "RELEASES"
_LINE = re.compile(r"^(?P<commit>[0-9a-f]{40})\s+(?P<name>\S.*?)\s*$")


class ReleaseError(RuntimeError):
    """A release that cannot be found or prepared; the message says why and what to do."""


@dataclass(frozen=True)
class Release:
    commit: str
    """The full commit hash."""
    name: str

    @property
    def short(self) -> str:
        return self.commit[:7]

    def __str__(self) -> str:
        return f"{self.name} ({self.short})"


@dataclass(frozen=True)
class Prepared:
    """A release ready to run: its code and its venv."""

    release: Release
    src: Path
    venv: Path

    @property
    def server(self) -> Path:
        """Its `a2a-server` command."""
        return self.venv / "bin" / "a2a-server"


def cache_dir() -> Path:
    return Path(os.environ.get("RELEASE_CACHE_DIR") or ROOT / ".cache" / "releases")


def parse(text: str) -> list[Release]:
    """The releases of a RELEASES text, oldest first; ValueError naming the line for a bad one."""
    out: list[Release] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"RELEASES line {n}: want '<full 40-hex commit hash> <name>', got {raw!r}")
        out.append(Release(m["commit"], m["name"]))
    if len({r.commit for r in out}) != len(out):
        raise ValueError("RELEASES names a commit twice")
    return out


def read(path: Path = RELEASES_FILE) -> list[Release]:
    return parse(path.read_text())


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True)
    if check and done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done


def has_commit(commit: str) -> bool:
    return _git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0


def tree(rev: str) -> str:
    return _git("rev-parse", f"{rev}^{{tree}}").stdout.decode().strip()


def _missing(release: Release) -> ReleaseError:
    shallow = _git("rev-parse", "--is-shallow-repository", check=False).stdout.decode().strip() == "true"
    why = "this clone is shallow: `git fetch --unshallow`" if shallow else "fetch main's history"
    return ReleaseError(
        f"the commit of release {release.name}, {release.commit}, is not in this clone ({why}); "
        "the upgrade check runs that commit's code"
    )


def same_code(commit: str, head: str = "HEAD") -> bool:
    """Whether `commit` and `head` have the same tree but for RELEASES (the line that cuts a release is
    committed after the release's commit)."""
    if tree(commit) == tree(head):
        return True
    done = _git("diff", "--quiet", commit, head, "--", ".", ":(exclude)RELEASES", check=False)
    return done.returncode == 0


def previous(releases: list[Release] | None = None, head: str = "HEAD") -> Release:
    """The newest release whose code is not `head`'s: the one running when `head` is rolled out."""
    releases = read() if releases is None else releases
    for release in reversed(releases):
        if not has_commit(release.commit):
            raise _missing(release)
        if not same_code(release.commit, head):
            return release
    raise ReleaseError("RELEASES names no release before this code: nothing to upgrade from")


def prepare(release: Release, cache: Path | None = None, log=None) -> Prepared:
    """The release's code and venv under `cache`/<commit>/, made once (under a lock) and reused."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    home = (cache or cache_dir()) / release.commit
    prepared = Prepared(release, home / "src", home / "venv")
    ready = home / ".ready"
    if ready.exists():
        return prepared
    if not has_commit(release.commit):
        raise _missing(release)
    home.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{release.commit}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return prepared
        log(f"releases: preparing {release} in {home} (once: its code and its own venv)")
        for part in (prepared.src, prepared.venv):
            shutil.rmtree(part, ignore_errors=True)
        archive = _git("archive", "--format=tar", release.commit).stdout
        prepared.src.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(prepared.src, filter="data")
        _run([sys.executable, "-m", "venv", str(prepared.venv)], "python -m venv")
        pip = str(prepared.venv / "bin" / "pip")
        _run([pip, "install", "-q", "-e", str(prepared.src)], f"pip install of release {release}")
        if not prepared.server.exists():
            raise ReleaseError(f"release {release} installed no a2a-server command")
        ready.write_text(f"{release.commit} {release.name}\n")
    return prepared


def _run(cmd: list[str], what: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise ReleaseError(f"{what} failed:\n{tail}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.releases", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["list", "previous", "prepare"])
    parser.add_argument("commit", nargs="?", help="prepare: a release's commit (default: the previous one)")
    args = parser.parse_args(argv)
    try:
        if args.action == "list":
            for release in read():
                print(release.commit, release.name)
        elif args.action == "previous":
            release = previous()
            print(release.commit, release.name)
        else:
            release = previous()
            if args.commit:
                found = [r for r in read() if r.commit.startswith(args.commit)]
                if len(found) != 1:
                    sys.exit(f"releases: {args.commit} names {len(found)} releases of RELEASES")
                release = found[0]
            print(prepare(release).venv.parent)
    except (ReleaseError, ValueError) as exc:
        sys.exit(f"releases: {exc}")


if __name__ == "__main__":
    main()
