"""Sphinx configuration of the bfp-train documentation.

Sphinx, because it is the Amaranth ecosystem's convention (Amaranth, Glasgow and LUNA document
themselves with it) and because its autodoc renders the numpydoc docstrings of the components and
the runtime into the API reference. Pages are MyST Markdown. Build with::

    .venv/bin/python -m sphinx -W -b html docs docs/_build/html
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

project = "bfp-train"
author = "bfp-train contributors"
copyright = "bfp-train contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown: fenced ```{directive} blocks, heading anchors for in-page links.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Docstrings are numpydoc; hardware components add Latency and Throughput sections.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_custom_sections = ["Latency", "Throughput"]
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"

html_theme = "furo"
html_title = "bfp-train"
