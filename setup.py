"""The compiled parts of pykraft; everything else is in pyproject.toml.

Three hot loops run in C, each beside its Python reference, which it is tested against
and which is the fallback when the extension is not built:

- the produce path's record check (src/pykraft/records/_scan.c; the reference is
  src/pykraft/records/validate.py): a Python loop over every record would cost more than
  the rest of the broker's produce work together;
- the records' decoding (the same module; the reference is
  src/pykraft/records/record.py's _decode_records_python): every node cuts every batch of
  the metadata log into records;
- the metadata records' reader (src/pykraft/metadata/_read.c; the reference is the Python
  that src/pykraft/metadata/codec.py generates): every node decodes every partition change.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pykraft.records._scan",
            sources=["src/pykraft/records/_scan.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        ),
        Extension(
            "pykraft.metadata._read",
            sources=["src/pykraft/metadata/_read.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        ),
    ]
)
