"""The one compiled part of pykraft; everything else is in pyproject.toml.

The produce path's record check (src/pykraft/records/validate.py) runs in C: a Python loop
over every record would cost more than the rest of the broker's produce work together.
`src/pykraft/records/validate.py` holds the same check in Python, the reference it is tested
against, and the fallback when the extension is not built.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pykraft.records._scan",
            sources=["src/pykraft/records/_scan.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
