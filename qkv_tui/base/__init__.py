"""The base every layer may use: how a value or a line of text is shown in a one-line message."""
