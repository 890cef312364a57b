"""Digests made readable: a ranked digest becomes a subject, a preheader, HTML and plain text.

- :mod:`.render`: the Jinja2 renderer (autoescape, operator templates first), CSS inlined once;
- :mod:`.fragments`: the renderer's per-run caches, with holes for each reader's links;
- :mod:`.shared_render`: one rendering for all readers with the same sections, cut at each
  reader's values;
- :mod:`.inline_css`: CSS inlined once into a Jinja template (``make templates``);
- :mod:`.excerpts`: the sentence that says what a paper did, and its headline result;
- :mod:`.latex`: LaTeX in feed text as Unicode text.

May import: core, config.
"""
