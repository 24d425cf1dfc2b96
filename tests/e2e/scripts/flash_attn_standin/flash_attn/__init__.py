"""Stand-in for the flash-attn packages on machines without their GPUs: FlashAttention 2's entry
points (flash_attn_interface.py) and FlashAttention-4's (cute/interface.py), with their call signatures."""
from flash_attn.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

__all__ = ["flash_attn_func", "flash_attn_varlen_func"]
