"""Public path of the app: ``from qkv_tui.app import QKVApp`` (it lives in ``qkv_tui.ui.app``)."""

from qkv_tui.ui.app import QKVApp

__all__ = ["QKVApp"]
