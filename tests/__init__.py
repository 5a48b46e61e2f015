"""Tests of kbctl (importable as the `tests` package so helpers like tests.httpserver can be shared)."""
