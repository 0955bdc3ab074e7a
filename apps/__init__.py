"""Runnable example apps: ``streamkit worker apps.pageviews``."""
