"""MkDocs hook: every page readable as a reader sees it, and the notebooks' pages made to work as they do in Jupyter.

- Heading ids that start with a digit (`1-single-location-regression`, from "1. Single-location regression") get the
  prefix `section-`: the theme's scroll tracking selects the current section with `#id`, a CSS selector that cannot
  start with a digit, and one such id stopped the theme's script on the page.
- `<k, v>` written in plain-text math (docstrings, Markdown) stays text instead of being taken for an HTML tag and
  swallowed: a tag's name is never followed by a comma or an asterisk.
- A notebook links to the next as `02_derivation.ipynb`, which Jupyter opens; in the site that notebook is the
  page `../02_derivation/` (mkdocs-jupyter leaves the links as written).
- The exercises' worked answers are cells collapsed in Jupyter (`metadata.jupyter.source_hidden`); the site shows
  each run of such cells folded in a `<details>` element, so that a student sees the question first there too.
- nbconvert's MathJax 2 loader (an empty `src`, since the site loads MathJax 3 for every page) is removed, and so are
  the notebooks' widgets: their state, saved by the execution, would be drawn by a script from a CDN as sliders that
  move nothing without a kernel. Each widget is shown as what it drew when the notebook ran (the figure at the
  sliders' starting values), under a line that names its controls and says they work in Jupyter.
"""

import json
import re
from html import escape as html_escape

import markdown
import nbformat
from markdown.extensions import toc
from markdown.inlinepatterns import InlineProcessor
from mkdocs.plugins import event_priority

#: The prefix of heading ids that would start with a digit.
SECTION_PREFIX = "section-"

_NOTEBOOK_LINK = re.compile(r'href="(\d\d_\w+)\.ipynb(#[^"]*)?"')
#: Where each cell of the rendered notebook starts (nbconvert's lab template: one such div per cell, in order).
_CELL_START = re.compile(r'<div class="jp-Cell [^"]*" id="cell-id=([^"]+)">')
#: A heading's id, or a link to one on the same page, starting with a digit (the notebooks' pages).
_DIGIT_ID = re.compile(r'(<h[1-6] id="|href="#)(\d)')
#: nbconvert's MathJax 2 loader and configuration (lab template), inert beside MathJax 3 but dead weight.
_MATHJAX2 = re.compile(
    r'<!-- Load mathjax -->\s*<script src="[^"]*">\s*</script>.*?<!-- End of mathjax configuration -->', re.S
)
#: nbconvert's loader of the widgets' renderer (from a CDN), the widgets' saved state, and each widget's view.
_WIDGET_LOADER = re.compile(r"<script>\s*\(function\(\) \{\s*function addWidgetsRenderer\(\).*?</script>", re.S)
_WIDGET_STATE = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S)
_WIDGET_VIEW = re.compile(
    r'<div class="jupyter-widgets jp-OutputArea-output"[^>]*>\s*<script type="text/javascript">[^<]*</script>\s*'
    r'<script type="application/vnd\.jupyter\.widget-view\+json">\s*(\{.*?\})\s*</script>\s*</div>',
    re.S,
)


def section_slugify(value: str, separator: str) -> str:
    """Python-Markdown's heading ids, with the prefix `section-` on those that would start with a digit."""
    slug = toc.slugify(value, separator)
    return SECTION_PREFIX + slug if slug[:1].isdigit() else slug


class _PlainAngleBrackets(InlineProcessor):
    """`<k, k*>`, `<X_l, k>`: text, not an HTML tag (a tag's name is followed by a space, `>` or `/`)."""

    def handleMatch(self, match, data):
        return markdown.util.AtomicString(match[0]), match.start(0), match.end(0)


class PlainAngleBracketsExtension(markdown.Extension):
    def extendMarkdown(self, md):
        # Before raw HTML (priority 90), after code spans and autolinks (<https://...>, which contain a colon).
        pattern = r"<[A-Za-z][\w-]*[^\w\s<>/:@\"'=-][^<>\n]*>"
        md.inlinePatterns.register(_PlainAngleBrackets(pattern, md), "plain_angle_brackets", 95)


@event_priority(100)  # before mkdocstrings reads the Markdown configuration for the docstrings
def on_config(config):
    config.mdx_configs.setdefault("toc", {})["slugify"] = section_slugify
    config.markdown_extensions.append(PlainAngleBracketsExtension())
    return config


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = _NOTEBOOK_LINK.sub(lambda match: f'href="../{match[1]}/{match[2] or ""}"', html)
    html = _DIGIT_ID.sub(lambda match: match[1] + SECTION_PREFIX + match[2], html)
    _prefix_digit_ids(page.toc)
    html = _MATHJAX2.sub("", html)
    html = _static_widgets(html)
    return _fold_hidden_cells(html, nbformat.read(page.file.abs_src_path, as_version=4))


def _prefix_digit_ids(anchors) -> None:
    for anchor in anchors:
        if anchor.id[:1].isdigit():
            anchor.id = SECTION_PREFIX + anchor.id
        _prefix_digit_ids(anchor.children)


def _static_widgets(html: str) -> str:
    """Each widget's view replaced by what its outputs showed when the notebook ran (the figure drawn at the sliders'
    starting values), under a note naming its controls; the widgets' state and renderer removed."""
    state = _WIDGET_STATE.search(html)
    if state is None:
        return html
    models = json.loads(state[1])["state"]
    html = _WIDGET_LOADER.sub("", html[: state.start()] + html[state.end() :])
    return _WIDGET_VIEW.sub(lambda match: _render_widget(json.loads(match[1])["model_id"], models), html)


def _render_widget(model_id: str, models: dict) -> str:
    controls, outputs = [], []

    def walk(identifier: str) -> None:
        model = models[identifier]
        if model["model_name"] == "OutputModel":
            outputs.extend(model["state"].get("outputs", []))
        elif model["state"].get("description"):
            controls.append(model["state"]["description"])
        for child in model["state"].get("children", []):
            walk(child.removeprefix("IPY_MODEL_"))

    walk(model_id)
    note = (
        f"In Jupyter, with a running kernel, controls for {', '.join(controls) or 'the parameters'} redraw what "
        "follows; here it is shown at their starting values."
    )
    shown = "".join(_render_output(output) for output in outputs)
    return f'<div class="static-widget"><p class="widget-note"><em>{note}</em></p>{shown}</div>'


def _render_output(output: dict) -> str:
    if output["output_type"] == "stream":
        return f"<pre>{html_escape(''.join(output['text']))}</pre>"
    data = output.get("data", {})
    if "image/png" in data:
        return f'<div class="jp-RenderedImage"><img src="data:image/png;base64,{data["image/png"]}" alt=""></div>'
    return f"<pre>{html_escape(''.join(data.get('text/plain', '')))}</pre>"


def _fold_hidden_cells(html: str, notebook) -> str:
    hidden = {cell.id for cell in notebook.cells if cell.metadata.get("jupyter", {}).get("source_hidden")}
    starts = list(_CELL_START.finditer(html))
    pieces, position, folding = [], 0, False
    for start in starts:
        pieces.append(html[position : start.start()])
        position = start.start()
        if start[1] in hidden and not folding:
            pieces.append('<details class="worked-answer"><summary>Worked answer (click to open)</summary>')
        elif start[1] not in hidden and folding:
            pieces.append("</details>")
        folding = start[1] in hidden
    if folding:  # the fold would have to close inside the page's own closing tags
        raise ValueError("a notebook's last cell is a hidden answer: end it with a visible cell")
    pieces.append(html[position:])
    return "".join(pieces)
