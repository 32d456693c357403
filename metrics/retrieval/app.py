"""Gradio widget of the retrieval metric (the Hugging Face Space's entry point)."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load(str(Path(__file__).with_name("retrieval.py")))
launch_gradio_widget(module)
