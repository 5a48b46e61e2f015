"""Retrieval from a published version: candidates, fusion, threshold, rerank, selection, and grounded context."""
