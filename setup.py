"""The one compiled part: the OTLP decoders of the receiver (protobuf) and of the loader (JSON lines),
collector/_otlp_native.c.

Everything else is configured in pyproject.toml; setuptools reads extension modules from here.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "restorelens.collector._otlp_native",
            ["collector/_otlp_native.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
        )
    ]
)
