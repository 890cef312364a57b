"""Every database error leaves the Store as a :class:`~newsletter.errors.StoreError`.

:func:`guard_errors` wraps each public method of the composed :class:`~newsletter.store.db.Store`
once, when the class is made (reader's ``_storage.wrap_exceptions`` idea): a SQLAlchemy error,
or an error of the database driver itself (the ledger's fast paths run SQL on the sqlite3 or
psycopg connection), raised anywhere under the call becomes ``self.error(e)`` (one line: which
database, what failed, what to do; :class:`~newsletter.errors.DatabaseUnavailable`,
:class:`~newsletter.errors.DatabaseReadOnly` or :class:`~newsletter.errors.StoreError`),
chained to the original.

Only the outer, public boundary is wrapped: the mixins' private helpers and the ledger's
reconnect-and-retry (:meth:`StoreBase._retrying`) still see the raw driver errors they decide
on, and a ``StoreError`` raised inside (the retry giving up, a refused vote) passes through
unchanged. What is not wrapped: :attr:`~StoreBase.engine`, a raw SQLAlchemy object (an error
from using it directly is the caller's to map with :meth:`StoreBase.error`); the ledger writer's
session (:mod:`.ledger_session`) maps its own errors the same way.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)

UNGUARDED = frozenset({"error", "close"})
"""Public methods that run no SQL: left as they are."""


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                return (yield from fn(self, *args, **kwargs))
            except self._db_errors as e:
                raise self.error(e) from e

        generator.__store_guarded__ = True  # type: ignore[attr-defined]
        return generator

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except self._db_errors as e:
            raise self.error(e) from e

    method.__store_guarded__ = True  # type: ignore[attr-defined]
    return method


def guarded_names(cls: type) -> list[str]:
    """The public methods of ``cls`` that :func:`guard_errors` wraps."""
    names = []
    for name in dir(cls):
        if name.startswith("_") or name in UNGUARDED:
            continue
        if inspect.isfunction(inspect.getattr_static(cls, name)):
            names.append(name)
    return names


def guard_errors(cls: _C) -> _C:
    """Class decorator: each public method of ``cls`` (its own and inherited) raises database
    errors as ``self.error(e)``; see the module docstring. Wraps each method once."""
    for name in guarded_names(cls):
        fn = inspect.getattr_static(cls, name)
        if not getattr(fn, "__store_guarded__", False):
            setattr(cls, name, _guarded(fn))
    return cls
