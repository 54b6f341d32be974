"""Where qkv-tui meets the outside: the command line, the exports, worksheets and serving."""
