"""The reconciling engine: stored state → fetch → plan → ingest → publish, with conditions and the controller.

plan (what each source will serve: reuse, ingest or fail) · ingest (chunk, embed what the cache lacks) ·
apply (apply and refresh, publishing one version) · explain (the plan as a diff, writing nothing) ·
prune · conditions · status (get / describe) · controller · events (what the engine reports).
"""
