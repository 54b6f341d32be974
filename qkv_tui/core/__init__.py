"""The math core: the scenario format, the NumPy engine and number formatting.

Imports nothing else of qkv_tui, and never Textual or Rich.
"""
