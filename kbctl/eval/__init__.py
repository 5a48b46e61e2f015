"""Measuring retrieval: eval sets, ranking metrics, runs per mode, and BEIR-format benchmark import."""
