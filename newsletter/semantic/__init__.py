"""Semantic matching: papers and topics as sentence-embedding vectors (optional).

With the ``semantic`` extra installed and a model available (:mod:`.model`), each paper's title
and abstract and each topic's query are embedded once and stored by the hash of their text
(:mod:`.vectors`); the ranker fuses their cosine similarity with its lexical score. Without
them, ranking is lexical and says so once.

May import: core, config, store.
"""
