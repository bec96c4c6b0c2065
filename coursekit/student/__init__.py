"""For the student: the workspace a student pack runs JupyterLab on (shipped as lab_workspace.py)."""
