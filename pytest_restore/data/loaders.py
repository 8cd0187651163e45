"""Data: dataset loaders, an extension point like policies and rankers.

A :class:`DatasetLoader` turns one benchmark's file into a
:class:`~pytest_restore.data.dataset.Dataset`: questions with their dates,
answers, types, histories and gold evidence, and nothing else; everything
after loading (units, eviction, injection, records, statistics, report) is
the same whatever the benchmark. The built-ins are ``longmemeval`` and
``locomo``; a user registers their own with the
``pytest_restore_register_datasets`` hook (a ``conftest.py``) or the
``pytest_restore.datasets`` entry-point group.

``--restore-data PATH`` picks the first registered loader whose
:meth:`DatasetLoader.fits` accepts the parsed file (built-ins first, then
entry points, then the hook's); ``--restore-dataset NAME`` forces one. A file
that fits no loader is one line naming what each expected.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from pytest_restore.data.dataset import (
    LONGMEMEVAL_BUDGETS,
    Dataset,
    PathLike,
    Question,
    RawData,
    is_prepared,
    load_cached,
    load_longmemeval,
    read_json,
)
from pytest_restore.data.fields import DataError, json_kind, show
from pytest_restore.data.locomo import LOCOMO_BUDGETS, fits_locomo, load_locomo
from pytest_restore.registry import Registry

__all__ = [
    "BUILTIN_DATASETS",
    "DatasetLoader",
    "DatasetRegistry",
    "Locomo",
    "LongMemEval",
    "check_dataset",
    "data_is_prepared",
    "default_datasets",
    "load_data",
    "pick_loader",
    "run_loader",
]


class DatasetLoader:
    """One benchmark's file format. Subclass it and set the class attributes; implement
    :meth:`fits` and :meth:`load`.
    """

    #: the registry name (``--restore-dataset NAME``)
    name: str = ""
    #: what a file must look like, in a few words (said when a file fits no loader)
    expects: str = ""
    #: the budgets (tokens) a run uses unless ``--restore-budgets`` names some: they should bind
    #: (be smaller than) most of the benchmark's histories
    budgets: tuple[int, ...] = LONGMEMEVAL_BUDGETS

    def fits(self, value: Any) -> bool:
        """Whether parsed JSON has this loader's shape (cheap: look at the top level only)."""
        raise NotImplementedError

    def load(self, data: RawData) -> Dataset:
        """The validated dataset; a malformed file raises a one-line ``DataError``.

        Set ``Dataset.name`` to this loader's name and ``Dataset.budgets`` to
        :attr:`budgets`; questions sharing a history share a ``history_id``;
        what is left out goes in ``Dataset.excluded`` with its reason.
        Call :func:`pytest_restore.data.dataset.check_encodable` on ``data``.
        """
        raise NotImplementedError


class LongMemEval(DatasetLoader):
    """LongMemEval-S (``longmemeval_s_cleaned.json``), the embedded synthetic default's layout."""

    name = "longmemeval"
    expects = "a JSON list of question records with question_id, question, answer and haystack_sessions"
    budgets = LONGMEMEVAL_BUDGETS

    def fits(self, value: Any) -> bool:
        """A list whose first item is an object with ``question_id`` or ``haystack_sessions``."""
        return (
            isinstance(value, list)
            and bool(value)
            and isinstance(value[0], dict)
            and ("question_id" in value[0] or "haystack_sessions" in value[0])
        )

    def load(self, data: RawData) -> Dataset:
        """LongMemEval-S's validation (:func:`pytest_restore.data.dataset.load_longmemeval`)."""
        return load_longmemeval(data)


class Locomo(DatasetLoader):
    """LoCoMo (``locomo10.json``): see :mod:`pytest_restore.data.locomo`."""

    name = "locomo"
    expects = "a JSON list of conversations with sample_id, conversation (session_N, session_N_date_time) and qa"
    budgets = LOCOMO_BUDGETS

    def fits(self, value: Any) -> bool:
        """A list whose first item is an object with ``conversation``, ``qa`` or ``sample_id``."""
        return fits_locomo(value)

    def load(self, data: RawData) -> Dataset:
        """LoCoMo's validation (:func:`pytest_restore.data.locomo.load_locomo`)."""
        return load_locomo(data, name=self.name)


class DatasetRegistry(Registry[DatasetLoader]):
    """Dataset loaders by name, in the order they were registered (the order files are matched in)."""

    kind = "dataset loader"
    item_type = DatasetLoader
    entry_point_group = "pytest_restore.datasets"


BUILTIN_DATASETS: tuple[type[DatasetLoader], ...] = (LongMemEval, Locomo)


def default_datasets() -> DatasetRegistry:
    """The built-in loaders plus those installed packages declare as entry points."""
    return DatasetRegistry.default(BUILTIN_DATASETS)


def _describe(value: Any) -> str:
    """What the top level of a parsed file is, for the no-loader message."""
    if isinstance(value, list):
        if not value:
            return "an empty list"
        first = value[0]
        if isinstance(first, dict):
            keys = ", ".join(list(first)[:5])
            return f"a list of objects (the first with keys {keys or 'none'})"
        return f"a list of {json_kind(first)}s"
    return f"a JSON {json_kind(value)}"


def _label(loader: DatasetLoader) -> str:
    """A loader as a message names it: its registry name and its class (a user's code is named as theirs)."""
    kind = type(loader)
    return f"dataset loader {loader.name!r} ({kind.__module__}.{kind.__qualname__})"


def _fits(loader: DatasetLoader, data: RawData) -> bool:
    """``loader.fits``, whose failure is a one-line ``DataError`` naming the loader."""
    try:
        return bool(loader.fits(data.value))
    except Exception as exc:  # noqa: BLE001 - a loader's own code: its failure is said as its own
        raise DataError(data.path, f"{_label(loader)}: fits() raised {type(exc).__name__}: {exc}") from None


def pick_loader(data: RawData, registry: DatasetRegistry, name: str | None = None) -> DatasetLoader:
    """The loader ``name`` names, or the first registered one that fits the file's shape."""
    if name is not None:
        try:
            return registry[name]
        except KeyError:
            raise DataError(data.path, f"no dataset loader named {name!r}; registered: {', '.join(registry)}") from None
    for loader in registry.values():
        if _fits(loader, data):
            return loader
    expected = "; ".join(f"{loader.name} expects {loader.expects}" for loader in registry.values())
    raise DataError(data.path, f"fits no dataset loader: found {_describe(data.value)}; {expected}")


def _code(registry: DatasetRegistry) -> list[str]:
    """The source files of the registered loaders (a prepared copy is stale when one changes)."""
    files: dict[str, None] = {}
    for loader in registry.values():
        try:
            files[inspect.getfile(type(loader))] = None
        except (TypeError, OSError):
            continue
    files[inspect.getfile(load_locomo)] = None
    return [f for f in files if os.path.isfile(f)]


def _key(registry: DatasetRegistry, name: str | None) -> str:
    return f"{name or 'auto'}|{','.join(registry)}"


def load_data(
    path: PathLike,
    registry: DatasetRegistry | None = None,
    *,
    name: str | None = None,
    cache_dir: PathLike | None = None,
    prepare: bool = True,
) -> Dataset:
    """Read ``path`` with the loader ``name`` names or, without it, the first that fits.

    With ``cache_dir``, the validated dataset is prepared there for other
    processes (see :func:`pytest_restore.data.dataset.load_cached`), or, with
    ``prepare=False``, only read from there when it was.
    """
    loaders = registry if registry is not None else default_datasets()

    def load(file: str) -> Dataset:
        data = read_json(file)
        return run_loader(pick_loader(data, loaders, name), data, loaders, forced=name is not None)

    return load_cached(path, cache_dir, _key(loaders, name), load, _code(loaders), prepare=prepare)


def run_loader(loader: DatasetLoader, data: RawData, registry: DatasetRegistry, *, forced: bool = False) -> Dataset:
    """``loader.load(data)``, held to the loader contract; every failure is a one-line ``DataError``.

    A ``DataError`` of a loader picked by shape says which loader read the
    file when another fits it too (and how to pick that one); any other
    exception, or a result that is not a :class:`Dataset`, is named as the
    loader's; the dataset must pass :func:`check_dataset`.
    """
    try:
        dataset = loader.load(data)
    except DataError as err:
        others = [] if forced else [o.name for o in registry.values() if o is not loader and _fits(o, data)]
        if not others:
            raise
        problem = (
            f"{err.problem} (read by the {loader.name} loader, picked by the file's shape; it fits "
            f"{', '.join(others)} too: --restore-dataset {others[0]} reads it with that one)"
        )
        raise DataError(
            err.path, problem, index=err.index, question_id=err.question_id, field=err.field, record=err.record
        ) from None
    except Exception as exc:  # noqa: BLE001 - a loader's own code: its failure is said as its own, in one line
        raise DataError(data.path, f"{_label(loader)} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(dataset, Dataset):
        shown = repr(dataset) if len(repr(dataset)) <= 60 else repr(dataset)[:56] + " ..."
        kind = "" if dataset is None else f" (a {type(dataset).__name__})"
        raise DataError(data.path, f"{_label(loader)} returned {shown}{kind}, not a Dataset (its load() must return one)")
    check_dataset(dataset, _label(loader))
    return dataset


def check_dataset(dataset: Dataset, label: str) -> None:
    """What every loader must give, checked (a ``DataError`` naming ``label`` and the questions otherwise).

    Each question's evidence names turns of its own history (a turn past it
    would be dropped silently at turn granularity and crash at session
    granularity), and questions sharing a ``history_id`` share one history
    (the audit builds it once, from the first: the second would be audited
    against a history that is not its own).
    """
    first: dict[str, Question] = {}
    for q in dataset.questions:
        sessions = q.haystack_sessions
        for s, t in q.evidence or ():
            if not (0 <= s < len(sessions) and 0 <= t < len(sessions[s])):
                size = f"{len(sessions)} sessions" + (f", session {s} of {len(sessions[s])} turns" if 0 <= s < len(sessions) else "")
                raise DataError(
                    dataset.path,
                    f"{label}: question {show(q.question_id)}: evidence ({s}, {t}) names no turn of its history ({size})",
                )
        other = first.setdefault(q.history_key, q)
        if other is q:
            continue
        differ = [
            what for what, a, b in (
                ("session ids", other.haystack_session_ids, q.haystack_session_ids),
                ("dates", other.haystack_dates, q.haystack_dates),
                ("sessions", other.haystack_sessions, q.haystack_sessions),
            ) if a != b
        ]
        if differ:
            raise DataError(
                dataset.path,
                f"{label}: questions {show(other.question_id)} and {show(q.question_id)} share history_id "
                f"{show(q.history_key)} but not their history (the {' and '.join(differ)} differ): a history_id "
                "names one history",
            )


def data_is_prepared(path: PathLike, cache_dir: PathLike, registry: DatasetRegistry, name: str | None = None) -> bool:
    """Whether :func:`load_data` with these arguments will read its prepared copy (a quick load)."""
    return is_prepared(path, cache_dir, _key(registry, name), _code(registry))

