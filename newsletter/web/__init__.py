"""The web app: subscribe, confirm, manage, one-click unsubscribe, archive, and a JSON API.

May import: core, config, store, semantic, digest, deliver, services, subscribe, bounces, runs,
edition.
"""

from newsletter.web.app import build_app, create_app

__all__ = ["build_app", "create_app"]
