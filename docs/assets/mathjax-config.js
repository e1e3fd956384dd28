// MathJax's configuration for every page of the site, read by docs/assets/mathjax/tex-chtml-full.js (loaded
// after this file, see mkdocs.yml). Two sources of math share it:
// - Markdown pages and docstrings: pymdownx.arithmatex writes \( ... \) and \[ ... \];
// - notebook pages: the cells' Markdown and SymPy's LaTeX outputs keep Jupyter's $ ... $ and $$ ... $$.
// MathJax skips code and pre elements, so a $ in a shell line or a printed table is left alone.
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
};
