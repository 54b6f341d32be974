"""The screen model: which panes, cells, highlights and explanations a position shows, as
plain data. Imports the core and the teaching layer; never Textual.
"""
