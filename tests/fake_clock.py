"""A clock the tests move by hand: ``clock()`` reads it, ``clock.sleep(s)`` moves it on at once (imported by
name; tests/ is on sys.path as the rootdir's conftest.py directory)."""

from __future__ import annotations


class Clock:
    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
