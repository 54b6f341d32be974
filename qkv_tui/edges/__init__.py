"""Where qkv-tui meets the outside: the command line and the exports."""
