"""Stand-in for flash_attn.cute: FA4's two entry points with its call signature (see interface.py)."""
from .interface import flash_attn_func, flash_attn_varlen_func

__all__ = ["flash_attn_func", "flash_attn_varlen_func"]
