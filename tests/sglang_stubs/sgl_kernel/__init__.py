"""A stand-in sgl_kernel for SGLang's CPU test environment (see _standin.py beside it)."""

from _standin import package

__getattr__ = package(__name__)
