"""Tests of the ranking package (``newsletter.rank``); ``relevance/`` holds the judged sets."""
