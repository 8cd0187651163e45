"""One registry shape for everything a user can add: policies, rankers, model providers, hypothesis families.

A registry maps names to instances of one base class, in registration order.
Built-ins are registered first, then whatever installed packages declare in
the registry's entry-point group, then (in a pytest run) what ``conftest.py``
files and plugins add through the registry's ``pytest_restore_register_*``
hook (see :mod:`pytest_restore.plugin.hookspecs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:  # annotations only: typing_extensions is not a runtime dependency
    from typing_extensions import Self

T = TypeVar("T")
R = TypeVar("R", bound="Registry[Any]")


class Registry(Mapping[str, T], Generic[T]):
    """Instances of :attr:`item_type` by their ``name`` attribute.

    Subclasses set :attr:`kind` (the word error messages use),
    :attr:`item_type` and :attr:`entry_point_group`.
    """

    kind: ClassVar[str] = "item"
    item_type: ClassVar[type]
    entry_point_group: ClassVar[str]

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        #: names whose item is made when first looked up (:meth:`register_lazy`)
        self._lazy: dict[str, Callable[[], T]] = {}

    @classmethod
    def default(cls, builtins: Iterable[Callable[[], Any]]) -> Self:
        """The built-ins (instantiated) and then every entry point of the group."""
        registry = cls()
        for item in builtins:
            registry.register(item())
        registry.load_entry_points()
        return registry

    def load_entry_points(self) -> None:
        """Register what installed packages declare (a class is instantiated, an instance taken as is)."""
        for ep in entry_points(group=self.entry_point_group):
            obj = ep.load()
            self.register(obj() if isinstance(obj, type) else obj)

    def register(self, item: T, *, replace: bool = False) -> None:
        """Add ``item`` under ``item.name``; a clash is an error unless ``replace``."""
        base = self.item_type
        if not isinstance(item, base):
            raise TypeError(f"{item!r} is not a {base.__module__}.{base.__qualname__} instance")
        name = getattr(item, "name", "")
        if not isinstance(name, str) or not name or "," in name:
            raise ValueError(f"{self.kind} {item!r} needs a non-empty name without commas")
        if name in self._items and name not in self._lazy and not replace:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        # an item registered by hand takes the place of a lazy built-in of its name (a conftest's own mem0)
        self._lazy.pop(name, None)
        self._items[name] = item

    def register_lazy(self, name: str, make: Callable[[], T]) -> None:
        """Register ``name`` now and make its item (``make()``) when it is first looked up.

        A built-in whose module imports a library (a memory library's
        adapter) costs nothing until a run names it; ``make`` may raise
        ``ImportError`` with the line that says what to install.
        """
        if name in self._items or name in self._lazy:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._lazy[name] = make
        self._items[name] = None  # type: ignore[assignment]  # a placeholder keeps the registration order

    def __getitem__(self, name: str) -> T:
        make = self._lazy.get(name)
        if make is not None:
            self.register(make(), replace=True)
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items  # without making a lazy item

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
