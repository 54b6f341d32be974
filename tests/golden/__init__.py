"""The golden corpus: today's outputs of every built-in and of generated scenarios, frozen as hashes.

A behaviour-preserving refactor keeps every hash; a deliberate change rewrites the manifest in a
commit of its own that says why (``python -m tests.golden write``). ``python -m tests.golden dump DIR``
writes the outputs themselves, so two commits' dumps can be compared with ``diff -r``.
"""
