"""Log a monitored training step's resource use as MLflow system metrics.

    pip install 'workerscope[mlflow]'
    MLFLOW_ALLOW_FILE_STORE=true python examples/mlflow_system_metrics.py

Uses MLFLOW_TRACKING_URI if set, else a local ./mlruns file store (mlflow-skinny has no
sqlite store; full mlflow does).
"""

import os

import mlflow

from workerscope import monitor, timed
from workerscope.export.mlflow import log_timeline


@timed
def train_step(n):
    return sum(i * i for i in range(n))


if __name__ == "__main__":
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        mlflow.set_tracking_uri("file:./mlruns")
    with mlflow.start_run() as run:
        with monitor(interval=0.2) as m:
            for _ in range(5):
                train_step(2_000_000)
        print("logged", log_timeline(m.timeline), "values to run", run.info.run_id)
