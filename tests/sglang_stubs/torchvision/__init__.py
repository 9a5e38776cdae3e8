"""A stand-in torchvision for SGLang's CPU test environment (see _standin.py beside it).

transformers reads a torchvision found on the path as installed and parses its version: the one
that goes with torch 2.13.
"""

from _standin import package

__version__ = "0.28.0"
__getattr__ = package(__name__)
