"""What an operator runs besides a send: the one-process server, the demo, checks and receivers.

- :mod:`.serve`: ``newsletter serve``, web, scheduler and inbound mail in one process;
- :mod:`.demo`: ``newsletter demo``, one full edition on the embedded default;
- :mod:`.preview`: what a subscriber would get today, nothing sent or recorded;
- :mod:`.status`: what ``newsletter status`` reports;
- :mod:`.inbound_mail`: the SMTP/LMTP receiver of email commands and bounces;
- :mod:`.smtp_sink`: a local SMTP sink that keeps every message in a Maildir.

May import: core, config, store, sources, semantic, rank, digest, services, subscribe, bounces,
runs, edition, subscriber_lists, web.
"""
