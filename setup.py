"""Only the optional C fast paths of the span ring, its writer's and its reader's; everything
else is in pyproject.toml.

optional=True: with no C compiler (or no Python headers) the build warns and goes on: the
pure-Python writer in workerscope/worker/recorder.py records the spans, and the pure-Python
reader in workerscope/spanring.py reads them.
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
        Extension(
            "workerscope._ringscan",
            ["workerscope/_ringscan.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
    ],
)
