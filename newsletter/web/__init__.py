"""The web app: subscribe, confirm, manage, one-click unsubscribe, archive, and a JSON API."""

from newsletter.web.app import create_app

__all__ = ["create_app"]
