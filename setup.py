"""Only the optional C fast path of the span recorder; everything else is in pyproject.toml.

optional=True: with no C compiler (or no Python headers) the build warns and goes on, and the
pure-Python writer in workerscope/worker/recorder.py records the spans.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "workerscope.worker._fastspan",
            ["workerscope/worker/_fastspan.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
    ],
)
