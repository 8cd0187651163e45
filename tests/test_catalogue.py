"""``python -m pytest_restore data``: the known datasets listed, fetched and checked, and ``--restore-data=NAME``.

Every download is from an HTTP server the test starts on 127.0.0.1, serving
small files whose checksums the test puts in the catalogue (the real
catalogue's files are never downloaded here): a whole file, a truncated
one, one with the right size and the wrong bytes, a 404, a port nobody
listens on, a download cut halfway and resumed with a range request, and a
server that ignores the range.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from grid_helpers import ROOT

from pytest_restore import __main__ as cli
from pytest_restore.data import catalogue as cat
from pytest_restore.data.catalogue import (
    CatalogueEntry,
    FetchError,
    NotFetched,
    fetch,
    resolve_name,
    state,
)
from pytest_restore.data.tokens import _ranks_cache_dirs
from pytest_restore.exits import IO_ERROR

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


LOCOMO_FIXTURE = ROOT / "fixtures" / "locomo_tiny.json"
PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes: the "dataset" the loopback server serves


@dataclass
class Loopback:
    """A file server on 127.0.0.1 with a few hostile modes; it records the requests it saw."""

    files: dict[str, bytes]
    #: path -> how many bytes to send before closing, while announcing the whole length
    cut_after: dict[str, int] = field(default_factory=dict)
    #: answer a range request with the whole file (200), as some servers do
    ignore_range: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


def _handler(server: Loopback) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            name = self.path.lstrip("/")
            wanted = self.headers.get("Range")
            server.requests.append((name, wanted))
            body = server.files.get(name)
            if body is None:
                self.send_error(404, "Not Found")
                return
            start = 0
            if wanted and not server.ignore_range:
                start = int(re.fullmatch(r"bytes=(\d+)-", wanted).group(1))  # type: ignore[union-attr]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            cut = server.cut_after.pop(name, None)  # only the first answer is cut
            self.wfile.write(body[start:cut] if cut is not None else body[start:])
            if cut is not None:
                self.wfile.flush()
                self.close_connection = True

    return Handler


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # a proxy from the environment would stand in between
    state_ = Loopback(files={})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state_))
    state_.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state_
    httpd.shutdown()
    httpd.server_close()


def entry_for(body: bytes, *, name: str = "locomo", filename: str = "locomo10.json", url: str = "") -> CatalogueEntry:
    """A catalogue entry whose size and checksum are ``body``'s."""
    real = cat.catalogue()[name]
    return replace(real, filename=filename, url=url or real.url, size=len(body), sha256=hashlib.sha256(body).hexdigest())


@pytest.fixture
def small_catalogue(monkeypatch: pytest.MonkeyPatch, loopback: Loopback) -> CatalogueEntry:
    """The catalogue with ``locomo`` replaced by :data:`PAYLOAD`, served at its URL by the loopback server."""
    loopback.files["locomo10.json"] = PAYLOAD
    entry = entry_for(PAYLOAD, url=loopback.url("locomo10.json"))
    monkeypatch.setattr(cat, "CATALOGUE", tuple(entry if e.name == "locomo" else e for e in cat.CATALOGUE))
    return entry


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command's exit code, stdout, and stderr without its progress lines (``data: ...``)."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, "".join(line for line in err.splitlines(keepends=True) if not line.startswith("data: "))


def test_the_catalogue_names_pinned_files_with_their_checksums() -> None:
    known = cat.catalogue()
    assert list(known) == ["locomo", "longmemeval-s", "locomo-errata"]
    for entry in known.values():
        assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256) and entry.size > 0
        assert re.search(r"/[0-9a-f]{40}/", entry.url), f"{entry.name}: its URL is not pinned to a revision"
        assert entry.url.startswith("https://") and entry.license and entry.page.startswith("https://")
    assert (known["locomo"].size, known["longmemeval-s"].size) == (2_805_274, 277_383_467)
    # the one the report recognizes as the official LongMemEval-S
    from pytest_restore.data.dataset import is_official_sha256

    assert is_official_sha256(known["longmemeval-s"].sha256)


def test_list_says_where_each_comes_from_and_whether_it_is_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry
) -> None:
    code, out, _ = run(capsys, "data", "list", "--dir", str(tmp_path))
    assert code == 0
    assert f"data directory: {tmp_path}" in out
    for entry in cat.CATALOGUE:
        assert f"{entry.name}: {entry.title}" in out and entry.sha256 in out and entry.url in out
        assert entry.license in out and f"{entry.size:,} bytes" in out
    assert out.count("here:    not fetched") == 3
    assert "use:     --restore-data=longmemeval-s" in out and "use:     --restore-errata=locomo-errata" in out
    (tmp_path / "locomo10.json").write_bytes(PAYLOAD)
    assert "here:    here, sha256 checked" in run(capsys, "data", "list", "--dir", str(tmp_path), "--verify")[1]
    (tmp_path / "locomo10.json").write_bytes(PAYLOAD[::-1])  # the same size, other bytes
    assert "its sha256 is not the catalogue's" in run(capsys, "data", "list", "--dir", str(tmp_path), "--verify")[1]


def test_a_whole_file_is_checked_and_stored_and_not_fetched_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry, loopback: Loopback,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = tmp_path / "cache" / "data"
    monkeypatch.setenv(cat.DATA_DIR_ENV, str(where))  # the environment variable, without --dir
    code, out, err = run(capsys, "data", "fetch", "locomo")
    assert code == 0, err
    assert (where / "locomo10.json").read_bytes() == PAYLOAD
    assert sorted(p.name for p in where.iterdir()) == ["locomo10.json"]  # no part file left
    assert f"locomo fetched, 10,240 bytes, sha256 checked: {where / 'locomo10.json'}" in out
    assert "--restore-data=locomo" in out
    assert loopback.requests == [("locomo10.json", None)]
    code, out, _ = run(capsys, "data", "fetch", "locomo")
    assert code == 0 and "already here" in out and len(loopback.requests) == 1


@pytest.mark.parametrize(
    ("served", "problem"),
    [
        (PAYLOAD[:5000], "5,000 bytes, not the 10,240 of locomo10.json: refused, nothing kept"),
        (PAYLOAD[::-1], "sha256 "),
        (PAYLOAD + b"x" * (1 << 21), "more than the 10,240 bytes of locomo10.json: refused, nothing kept"),
    ],
    ids=["truncated", "wrong-checksum", "too-long"],
)
def test_a_file_that_is_not_the_catalogues_is_refused_in_one_line_and_nothing_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry, loopback: Loopback,
    served: bytes, problem: str,
) -> None:
    loopback.files["mirror/locomo10.json"] = served
    code, _out, err = run(capsys, "data", "fetch", "locomo", "--from", loopback.url("mirror/locomo10.json"), "--dir", str(tmp_path))
    assert code == cat.DATA_ERROR == 65
    assert err.count("\n") == 1 and problem in err and err.startswith("error: data fetch locomo: http://127.0.0.1:")
    assert "refused, nothing kept" in err
    assert list(tmp_path.iterdir()) == []


def test_a_404_and_no_network_are_one_line_and_the_unavailable_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry, loopback: Loopback
) -> None:
    code, _, err = run(capsys, "data", "fetch", "locomo", "--from", loopback.url("nothing-here.json"), "--dir", str(tmp_path))
    assert code == cat.UNAVAILABLE == 69
    assert err.count("\n") == 1 and "HTTP 404" in err and "locomo10.json not served there" in err
    with socket.socket() as probe:  # a port nobody listens on: the connection is refused, as offline
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    code, _, err = run(capsys, "data", "fetch", "locomo", "--from", f"http://127.0.0.1:{closed}/locomo10.json", "--dir", str(tmp_path))
    assert code == 69
    assert err.count("\n") == 1 and f"cannot reach 127.0.0.1:{closed}" in err and "offline?" in err
    assert list(tmp_path.iterdir()) == []


def test_a_cut_download_is_kept_and_resumed_with_a_range_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry, loopback: Loopback
) -> None:
    loopback.cut_after["locomo10.json"] = 4096
    code, _, err = run(capsys, "data", "fetch", "locomo", "--dir", str(tmp_path))
    assert code == 69
    assert "cut after 4,096 of 10,240 bytes" in err and "the same command resumes it" in err
    assert (tmp_path / "locomo10.json.part").read_bytes() == PAYLOAD[:4096]
    assert "a cut download of 4,096 of 10,240 bytes" in run(capsys, "data", "list", "--dir", str(tmp_path))[1]
    code, out, err = run(capsys, "data", "fetch", "locomo", "--dir", str(tmp_path))
    assert code == 0, err
    assert loopback.requests[-1] == ("locomo10.json", "bytes=4096-")
    assert "resumed at byte 4,096" in out
    assert (tmp_path / "locomo10.json").read_bytes() == PAYLOAD
    assert not (tmp_path / "locomo10.json.part").exists()


def test_a_server_that_ignores_the_range_restarts_the_download(
    tmp_path: Path, small_catalogue: CatalogueEntry, loopback: Loopback
) -> None:
    loopback.ignore_range = True
    (tmp_path / "locomo10.json.part").write_bytes(b"stale bytes of another attempt")
    done = fetch(small_catalogue, tmp_path)
    assert done.downloaded and done.resumed_from == 0
    assert loopback.requests == [("locomo10.json", "bytes=30-")]
    assert (tmp_path / "locomo10.json").read_bytes() == PAYLOAD


def test_from_a_local_copy_is_checked_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry
) -> None:
    store = tmp_path / "store"
    copy = tmp_path / "copy.json"
    copy.write_bytes(PAYLOAD[:100])
    code, _, err = run(capsys, "data", "fetch", "locomo", "--from", str(copy), "--dir", str(store))
    assert code == 65 and f"{copy}: 100 bytes, not the 10,240" in err and list(store.iterdir()) == []
    code, _, err = run(capsys, "data", "fetch", "locomo", "--from", str(tmp_path / "absent.json"), "--dir", str(store))
    assert code == 2 and "no such file" in err
    copy.write_bytes(PAYLOAD)
    code, _out, err = run(capsys, "data", "fetch", "locomo", "--from", str(copy), "--dir", str(store))
    assert code == 0, err
    assert (store / "locomo10.json").read_bytes() == PAYLOAD


def test_a_data_directory_that_cannot_be_made_is_the_io_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_catalogue: CatalogueEntry
) -> None:
    (tmp_path / "file").write_text("in the way")
    code, _, err = run(capsys, "data", "fetch", "locomo", "--dir", str(tmp_path / "file" / "data"))
    assert code == IO_ERROR and err.count("\n") == 1 and "data directory" in err


def test_an_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["data", "fetch", "locomo11"])
    assert exit_.value.code == 2
    assert "invalid choice: 'locomo11'" in capsys.readouterr().err


def test_a_name_resolves_to_the_fetched_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cat.DATA_DIR_ENV, str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NotFetched, match=re.escape(
        f"--restore-data=locomo: locomo is not fetched (no {tmp_path / 'locomo10.json'}); get it with "
        "`python -m pytest_restore data fetch locomo`"
    )):
        resolve_name("locomo", "--restore-data")
    (tmp_path / "locomo10.json").write_text("[]")
    assert resolve_name("locomo", "--restore-data") == str(tmp_path / "locomo10.json")
    assert resolve_name("locomo-errata", "--restore-data") == "locomo-errata"  # not a data file's name
    assert resolve_name("mine.json", "--restore-data") == "mine.json"  # a path: the loader says if it is missing
    (tmp_path / "locomo-errata").write_text("{}")
    assert resolve_name("locomo-errata", "--restore-errata") == "locomo-errata"  # a file of that name wins
    monkeypatch.delenv(cat.DATA_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cat.data_dir() == tmp_path / "xdg" / "pytest-restore" / "data"
    # one rule for the user's cache (user_cache.py): tiktoken's parsed ranks are kept beside the data
    assert _ranks_cache_dirs()[-1] == cat.data_dir().parent
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty: the default, as the XDG rule says
    assert cat.data_dir() == Path.home() / ".cache" / "pytest-restore" / "data" and _ranks_cache_dirs()[-1] == cat.data_dir().parent
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(NotFetched, match=f"or set {cat.DATA_DIR_ENV} to where it is"):
        resolve_name("longmemeval-s", "--restore-data")


def test_fetch_locomo_then_restore_data_locomo_runs_the_locomo_grid(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    loopback: Loopback,
) -> None:
    """The issue's path: fetch from a mirror (here the project's small LoCoMo fixture, under the catalogue's
    name), then ``--restore-data=locomo`` and ``--restore-errata=locomo-errata`` name what was stored."""
    fixture = LOCOMO_FIXTURE.read_bytes()
    errata = (ROOT / "fixtures" / "locomo_tiny_errata.json").read_bytes()
    loopback.files.update({"locomo10.json": fixture, "errors.json": errata})
    monkeypatch.setattr(cat, "CATALOGUE", (
        entry_for(fixture), entry_for(errata, name="locomo-errata", filename="errors.json"),
    ))
    store = pytester.path / "datasets"
    monkeypatch.setenv(cat.DATA_DIR_ENV, str(store))
    for name, file in (("locomo", "locomo10.json"), ("locomo-errata", "errors.json")):
        code, _, err = run(capsys, "data", "fetch", name, "--from", loopback.url(file))
        assert code == 0, err
    quick = ["-p", "no:xdist", "--restore-bootstrap", "200", "--restore-family-checks", "report",
             "--restore-policies", "fifo", "--restore-budgets", "300"]
    result = pytester.runpytest_inprocess("--restore", *quick, "--restore-data=locomo", "--restore-errata=locomo-errata")
    assert result.ret == 0, result.outlines[-15:]
    result.stdout.fnmatch_lines(["*locomo10.json read as locomo*", "*errors.json read as locomo-audit*"])
    summary = json.loads((pytester.path / "restore-report" / "summary.json").read_text())
    assert summary["run"]["dataset"]["sha256"] == hashlib.sha256(fixture).hexdigest()
    # not fetched: one line naming the command that gets it, before any work
    (store / "locomo10.json").unlink()
    missing = pytester.runpytest_inprocess("--restore", *quick, "--restore-data=locomo")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--restore-data=locomo: locomo is not fetched*python -m pytest_restore data fetch locomo`"])


def test_fetch_error_carries_its_code() -> None:
    err = FetchError("x", 69)
    assert err.code == 69 and str(err) == "x"
    assert state(cat.catalogue()["locomo"], Path("/nonexistent")) == "not fetched"
