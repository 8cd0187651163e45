"""The install commands README and GUIDE give, run verbatim in fresh virtual environments, then the audit.

Each ```bash block of README's "Install" section is one way to install
(from a clone, from the git URL, from a wheel built by ``python -m build``).
The test runs the block as written, in an empty directory with a fresh
virtual environment first on ``PATH``, then runs the audit from another
empty directory with that environment's ``pytest``, and checks the package
it imported is the one the block installed. GUIDE's set-up block must use
one of those commands verbatim.

What makes it cheap and offline, without changing a command:

- ``https://github.com/OWNER/pytest-restore`` reaches a local bare clone of
  this checkout (git's ``url.<bare>.insteadOf``, given in the environment as
  ``GIT_CONFIG_KEY_0``/``GIT_CONFIG_VALUE_0``, so no git configuration file
  is written): ``git clone`` and pip's ``git+`` both read this commit.
- The environment sees the running one's site-packages (a ``.pth`` file that
  adds them as site directories, the way ``--system-site-packages`` would if
  this interpreter were not itself a virtual environment), so the
  dependencies are already satisfied and only pytest-restore is installed.
  ``pip`` and ``pytest`` are the running environment's, called through
  scripts in the new one. The build backend (setuptools) comes from the
  package index pip is configured with, as for any user: for the wheel's
  block in ``python -m build``'s isolated environment; for the two blocks
  that ``pip install`` the source, fetched once for the module
  (:func:`build_backend`) and given to pip's build on ``PYTHONPATH`` with
  its isolation off, so that each does not make an environment and install
  setuptools into it again (3 CPU s a block).
- The audit is one cell on the project's tiny fixture with the kernels
  uncompiled (``NUMBA_DISABLE_JIT``): it checks the install, not the kernels.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from grid_helpers import shared_run

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "tiny.json"
#: The place-holder the docs give for the account that hosts the repository.
REPO_URL = "https://github.com/OWNER/pytest-restore"
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)


def section(doc: Path, heading: str) -> str:
    """The text of ``doc`` under ``heading`` (a ``## `` heading), up to the next heading of that level."""
    text = doc.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def install_blocks() -> list[str]:
    """README's install commands: each ```bash block of its "Install" section."""
    return _FENCE.findall(section(ROOT / "README.md", "Install"))


def _git_repository() -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=False, capture_output=True).returncode == 0


def _bare_clone(where: Path) -> None:
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(where / "pytest-restore.git")], check=True)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare clone of this checkout's commit: what ``https://github.com/OWNER/pytest-restore`` reaches here.

    Made once for the test run, as :func:`build_backend` is (``shared_run``): under xdist the three
    blocks' tests may each run on a worker of its own.
    """
    if not _git_repository():
        pytest.skip("not a git checkout: the git URL cannot be served from it")
    return shared_run(tmp_path_factory, "install-origin", _bare_clone) / "pytest-restore.git"


def _install_build_backend(where: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    requires = re.search(r"^\[build-system\]\nrequires = \[(.*?)\]", text, re.MULTILINE)
    assert requires, "pyproject.toml names no build requirements"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(where / "site"),
         *re.findall(r'"([^"]+)"', requires.group(1))],
        check=True,
    )


@pytest.fixture(scope="module")
def build_backend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's build requirements (``[build-system] requires``), installed from the index into a directory.

    Installed once for the test run and read by every worker's blocks (``shared_run``): a pip install
    from the index, 2 CPU s, which each xdist worker running one of the blocks made again.
    """
    return shared_run(tmp_path_factory, "install-build-backend", _install_build_backend) / "site"


def fresh_environment(where: Path) -> Path:
    """A new virtual environment that sees the running one's packages; its ``bin`` directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # this environment's site directories (a system Python's dist-packages and user site too)
    parents = dict.fromkeys(
        [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
        + [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
    )
    # named to sort last: the environment's own packages (pytest-restore, once installed) come first
    Path(purelib, "zz_running_environment.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in parents) + "\n", encoding="utf-8"
    )
    for name in ("pip", "pytest"):
        script = next(ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == name)
        module, _, attr = script.value.partition(":")
        path = where / "bin" / name
        path.write_text(f"#!{python}\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n", encoding="utf-8")
        path.chmod(0o755)
    return where / "bin"


def child_env(bin_dir: Path, bare: Path) -> dict[str, str]:
    """The environment a user's shell would have with the fresh environment activated (nothing of this session's)."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST") and not k.startswith("PYTEST_XDIST")
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(bin_dir.parent),
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0=f"url.{bare}.insteadOf",
        GIT_CONFIG_VALUE_0=REPO_URL,
        GIT_TERMINAL_PROMPT="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        NUMBA_DISABLE_JIT="1",
    )
    return env


def test_readme_gives_the_three_installs_and_says_the_package_is_not_on_the_index() -> None:
    text = section(ROOT / "README.md", "Install")
    assert "not yet on the package index" in text and "OWNER" in text
    blocks = install_blocks()
    assert len(blocks) == 3
    assert "pip install ./pytest-restore" in blocks[0]
    assert f"pip install 'git+{REPO_URL}'" in blocks[1]
    assert "python -m build" in blocks[2] and "pip install dist/" in blocks[2]
    assert not any(re.search(r"pip install '?pytest-restore", b) for b in blocks)  # not from the index


def test_guides_set_up_uses_one_of_the_readmes_installs_verbatim() -> None:
    (block, *_) = _FENCE.findall(section(ROOT / "docs" / "GUIDE.md", "0. Set up"))
    installs = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("pip install")]
    readme = {line.split("#")[0].strip() for b in install_blocks() for line in b.splitlines()}
    assert installs and set(installs) <= readme
    assert "pytest -n auto --restore" in block


@pytest.mark.slow
@pytest.mark.parametrize("index", range(3), ids=["clone", "git-url", "wheel"])
def test_an_install_block_run_verbatim_gives_a_working_audit(
    index: int, bare: Path, build_backend: Path, tmp_path: Path
) -> None:
    block = install_blocks()[index]
    bin_dir = fresh_environment(tmp_path / "venv")
    env = child_env(bin_dir, bare)
    work = tmp_path / "work"
    work.mkdir()
    # pip's build of the source: the build requirements fetched once, not an isolated environment a block
    # (python -m build, the wheel's block, still makes its own from the index)
    building = {**env, "PIP_NO_BUILD_ISOLATION": "0", "PYTHONPATH": str(build_backend)} if "python -m build" not in block else env
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], check=False, cwd=work, env=building, capture_output=True, text=True)
    assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    python = bin_dir / "python"
    where = subprocess.run(
        [str(python), "-c", "import pytest_restore; print(pytest_restore.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv"), f"imported {where}, not the installed copy"
    for wheel in (work / "pytest-restore" / "dist").glob("*.whl"):  # the wheel holds every module of the package
        names = set(zipfile.ZipFile(wheel).namelist())
        modules = {p.relative_to(work / "pytest-restore").as_posix() for p in (work / "pytest-restore" / "pytest_restore").rglob("*.py")}
        assert modules and modules <= names, sorted(modules - names)
    empty = tmp_path / "empty"
    empty.mkdir()
    # one xdist worker (the wheel's case): the installed plugin loaded by a worker and its records gathered, as
    # under -n 2, one interpreter fewer; langsmith's pytest plugin (the running environment's langmem brings it;
    # a fresh environment with pytest-restore alone has none) would cost each process 0.8 s of imports
    audit = subprocess.run(
        ["pytest", "-p", "no:langsmith_plugin", "--restore", f"--restore-data={TINY}", "--restore-policies", "fifo",
         "--restore-budgets", "300", "--restore-bootstrap", "100", "--restore-family-checks", "report",
         *(["-n", "1"] if index == 2 else ["-p", "no:xdist"])],
        check=False, cwd=empty, env=env, capture_output=True, text=True,
    )
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    assert "1 passed" in audit.stdout and (empty / "restore-report" / "report.md").is_file()


def test_the_report_directories_are_ignored_here_and_guide_tells_users_to_ignore_them(tmp_path: Path) -> None:
    """Every directory the plugin and the command line write by default, and a report being written."""
    from pytest_restore.__main__ import build_parser
    from pytest_restore.run.options import OPTIONS
    from pytest_restore.run.staging import partial_dir, staging_dir

    report = Path(next(default for name, default, _, _ in OPTIONS if name == "report-dir"))
    compare = build_parser().parse_args(["compare", "old", "new"]).out
    staging = staging_dir(tmp_path / partial_dir(report).name)  # the name a report being written has
    written = [report.name, partial_dir(report).name, compare, staging.name]
    assert written[:3] == ["restore-report", "restore-report.partial", "restore-compare"]
    (block,) = [b for b in re.findall(r"^```text\n(.*?)^```", section(ROOT / "docs" / "GUIDE.md", "0. Set up"),
                                      re.MULTILINE | re.DOTALL)]
    patterns = block.split()
    # git's own matching, on the repository's .gitignore and on the lines GUIDE gives users
    (tmp_path / "user").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "user")], check=True)
    (tmp_path / "user" / ".gitignore").write_text("\n".join(patterns) + "\n")
    for repo in (ROOT, tmp_path / "user"):
        for name in written:
            ignored = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index", f"{name}/report.md"], check=False)
            assert ignored.returncode == 0, f"{repo}: {name}/ is not ignored"
        kept = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index", "restore_notes.md"], check=False)
        assert kept.returncode == 1  # the patterns are not so wide that they hide a user's file
