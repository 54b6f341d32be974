"""The Textual app and its widgets: draws the screen model and turns keys into positions."""
