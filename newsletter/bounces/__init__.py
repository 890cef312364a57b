"""Deliverability: bounces, complaints and unsubscribe requests that arrive after the relay's 250.

Every receiver (the inbound SMTP/LMTP server, the IMAP poller, the providers' webhooks) turns what
it got into :class:`~newsletter.bounces.events.BounceEvent` values; one place decides what each
event does to a subscriber (a bounce score, suppression, an unsubscribe).

May import: core, store, services, subscribe, runs.
"""
