"""Tests of kbctl (importable as the `tests` package so helpers like tests.support.httpserver can be shared)."""
