"""``newsletter cache``: the model cache (ONNX files made from a model's weights).

``cache show`` says where the cache is and what it holds; ``cache clean`` empties it (the
entries made before the cache was keyed by content too). Both read ``ranking.model_cache``
from the config when there is one, and use the default folder when there is none, so they
also work where no instance was set up (a developer's machine after a few virtual
environments). See :mod:`newsletter.semantic.cache`.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors


def _cache_folder(obj: Context) -> tuple[Path, str]:
    """The cache folder and where its location came from (for the printed line)."""
    from newsletter.config import DEFAULT_CONFIG, ENV_CONFIG
    from newsletter.semantic.cache import default_cache, model_cache

    if (
        obj.config_path is None
        and not os.environ.get(ENV_CONFIG)
        and not Path(DEFAULT_CONFIG).is_file()
    ):
        return default_cache(), "the default location; no config file here"
    config = obj.config
    if config.settings.ranking.model_cache:
        return model_cache(config), f"ranking.model_cache in {config.path}"
    return model_cache(config), "the default location"


@cli.group()
def cache() -> None:
    """The model cache: ONNX files made from a model's weights (docs/topics.md)."""


@cache.command("show")
@click.pass_obj
def cache_show(obj: Context) -> None:
    """Where the model cache is and how much it holds."""
    from newsletter.semantic.cache import usage

    with errors():
        folder, why = _cache_folder(obj)
    found = usage(folder)
    output.console.print(
        f"Model cache ({why}): {found.line()}.", highlight=False, markup=False, soft_wrap=True
    )
    if found.entries:
        output.console.print(
            "'newsletter cache clean' empties it; a model's ONNX form is made again when needed.",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@cache.command("clean")
@click.pass_obj
def cache_clean(obj: Context) -> None:
    """Empty the model cache; a model's ONNX form is made again (a second or two) when needed."""
    from newsletter.semantic.cache import clean, megabytes

    with errors():
        folder, _why = _cache_folder(obj)
    try:
        removed = clean(folder)
    except OSError as e:
        output.fail(f"cannot empty the model cache {folder}: {e.strerror or e}")
    if not removed.entries:  # (the remembered hashes went too: they are the cache's)
        output.console.print(
            f"Model cache {folder}: nothing to remove.", highlight=False, soft_wrap=True
        )
        return
    output.console.print(
        f"Removed {removed.entries} model{'' if removed.entries == 1 else 's'} "
        f"({megabytes(removed.bytes)}) from {folder}.",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
