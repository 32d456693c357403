"""Gradio widget of the audit metric (the Hugging Face Space's entry point)."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load(str(Path(__file__).with_name("audit.py")))
launch_gradio_widget(module)
