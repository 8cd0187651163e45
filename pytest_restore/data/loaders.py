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
    DataError,
    Dataset,
    PathLike,
    RawData,
    is_prepared,
    json_kind,
    load_cached,
    load_longmemeval,
    read_json,
)
from pytest_restore.data.locomo import LOCOMO_BUDGETS, fits_locomo, load_locomo
from pytest_restore.registry import Registry

__all__ = [
    "BUILTIN_DATASETS",
    "DatasetLoader",
    "DatasetRegistry",
    "Locomo",
    "LongMemEval",
    "data_is_prepared",
    "default_datasets",
    "load_data",
    "pick_loader",
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


def pick_loader(data: RawData, registry: DatasetRegistry, name: str | None = None) -> DatasetLoader:
    """The loader ``name`` names, or the first registered one that fits the file's shape."""
    if name is not None:
        try:
            return registry[name]
        except KeyError:
            raise DataError(data.path, f"no dataset loader named {name!r}; registered: {', '.join(registry)}") from None
    for loader in registry.values():
        if loader.fits(data.value):
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
) -> Dataset:
    """Read ``path`` with the loader ``name`` names or, without it, the first that fits.

    With ``cache_dir``, the validated dataset is prepared there for other
    processes (see :func:`pytest_restore.data.dataset.load_cached`).
    """
    loaders = registry if registry is not None else default_datasets()

    def load(file: str) -> Dataset:
        data = read_json(file)
        return pick_loader(data, loaders, name).load(data)

    return load_cached(path, cache_dir, _key(loaders, name), load, _code(loaders))


def data_is_prepared(path: PathLike, cache_dir: PathLike, registry: DatasetRegistry, name: str | None = None) -> bool:
    """Whether :func:`load_data` with these arguments will read its prepared copy (a quick load)."""
    return is_prepared(path, cache_dir, _key(registry, name), _code(registry))

