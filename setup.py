"""The package list, which pyproject.toml cannot express; everything else is in pyproject.toml.

Every flowsim package is found (so new ones, such as flowsim.tasks.*, are never left out),
plus flowsim.derivations: the checkout's derivations/ folder, mapped by the `package-dir`
table of pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["flowsim", "flowsim.*"]), "flowsim.derivations"])
