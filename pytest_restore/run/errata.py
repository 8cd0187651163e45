"""``--restore-errata FILE`` in a run: the option checked, the corrections applied to the data as it loads.

The corrections themselves (formats, their registry, what applying one
does) are the data stage's (``data/errata.py``); here the run reads the
three options, applies the file where its data source reads the data, says
what it did, and names it in the run id.
"""

from __future__ import annotations

from pathlib import Path

from pytest_restore.data.catalogue import NotFetched, resolve_name
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.errata import (
    ErrataRegistry,
    ErrataSummary,
    apply_errata,
    load_errata,
    parse_parts,
)
from pytest_restore.run.options import RawOptions
from pytest_restore.run.settings import SettingsError


class ErrataOption:
    """``--restore-errata FILE`` (with ``--restore-errata-apply`` and ``--restore-errata-format``), read and checked."""

    def __init__(self, path: str, parts: tuple[str, ...], formats: ErrataRegistry, format_name: str | None) -> None:
        self.path = path
        self.parts = parts
        self.formats = formats
        if format_name is not None and format_name not in self.formats:
            raise SettingsError(
                f"--restore-errata-format: unknown errata format {format_name!r}; registered: {', '.join(self.formats)}"
            )
        self.format_name = format_name
        #: what the file did to the dataset, once applied
        self.summary: ErrataSummary | None = None

    @classmethod
    def of(cls, options: RawOptions, formats: ErrataRegistry) -> ErrataOption | None:
        """The option as given (``None``: no errata); an unknown part or format, or errata without data, is a ``SettingsError``."""
        path, apply, format_name = (options.values.get(n, "") for n in ("errata", "errata-apply", "errata-format"))
        if not path:
            if format_name or "errata-apply" in options.given:
                raise SettingsError(
                    "--restore-errata-apply/--restore-errata-format: name the corrections of --restore-errata, which is not given"
                )
            return None
        if not options.values.get("data"):
            raise SettingsError("--restore-errata: corrects --restore-data, which is not given (the embedded dataset has no errata)")
        try:  # a known corrections file's name (--restore-errata=locomo-errata) is the file `data fetch` stored
            path = resolve_name(path, "--restore-errata")
        except NotFetched as err:
            raise SettingsError(str(err)) from None
        try:
            parts = parse_parts(apply or "evidence")
        except ValueError as err:
            raise SettingsError(f"--restore-errata-apply: {err}") from None
        return cls(path, parts, formats, format_name or None)

    def apply(self, dataset: Dataset) -> tuple[Dataset, ErrataSummary]:
        """The dataset with the corrections applied (a malformed file raises a one-line ``DataError``)."""
        data, format_name, corrections = load_errata(self.path, dataset, self.formats, name=self.format_name)
        return apply_errata(dataset, data, format_name, corrections, self.parts)

    def identity(self) -> str:
        """What the run id adds for the errata: the file's sha256 and the parts applied."""
        sha = self.summary.sha256 if self.summary is not None else "unread"
        return f":errata={sha}:{'+'.join(self.parts)}"


def errata_line(summary: ErrataSummary) -> str:
    """What the run says once the corrections are applied."""
    total = {key: sum(counts[key] for _, counts in summary.by_type) for key in ErrataSummary.COUNTS}
    return (
        f"{Path(summary.path).name} read as {summary.format}: {summary.read} corrections "
        f"({', '.join(f'{n} {kind}' for kind, counts in summary.by_type for n in [counts['read']])}); "
        f"applied ({', '.join(summary.parts)}): {total['evidence']} evidence, {total['answer']} answers replaced, "
        f"{total['unanswerable']} questions excluded as unanswerable, {total['not_applied']} to questions left out"
    )
