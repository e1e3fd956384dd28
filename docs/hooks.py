"""MkDocs hook: the notebooks' pages, rendered by mkdocs-jupyter, made to work as they do in Jupyter.

- A notebook links to the next as `02_derivation.ipynb`, which Jupyter opens; in the site that notebook is the
  page `../02_derivation/` (mkdocs-jupyter leaves the links as written).
- The exercises' worked answers are cells collapsed in Jupyter (`metadata.jupyter.source_hidden`); the site shows
  each run of such cells folded in a `<details>` element, so that a student sees the question first there too.
"""

import re

import nbformat

_NOTEBOOK_LINK = re.compile(r'href="(\d\d_\w+)\.ipynb(#[^"]*)?"')
#: Where each cell of the rendered notebook starts (nbconvert's lab template: one such div per cell, in order).
_CELL_START = re.compile(r'<div class="jp-Cell [^"]*" id="cell-id=([^"]+)">')


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = _NOTEBOOK_LINK.sub(lambda match: f'href="../{match[1]}/{match[2] or ""}"', html)
    return _fold_hidden_cells(html, nbformat.read(page.file.abs_src_path, as_version=4))


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
