"""MkDocs hook: the notebooks' links to one another, written for Jupyter, made to work in the site.

A notebook links to the next as `02_derivation.ipynb`, which Jupyter opens; in the site that notebook is the page
`../02_derivation/` (mkdocs-jupyter renders each notebook as a page and leaves its links as written).
"""

import re

_NOTEBOOK_LINK = re.compile(r'href="(\d\d_\w+)\.ipynb(#[^"]*)?"')


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    return _NOTEBOOK_LINK.sub(lambda match: f'href="../{match[1]}/{match[2] or ""}"', html)
