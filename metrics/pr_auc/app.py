"""Gradio widget of the PR-AUC metric (the Hugging Face Space's entry point)."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load(str(Path(__file__).with_name("pr_auc.py")))
launch_gradio_widget(module)
