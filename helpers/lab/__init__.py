"""The course's own tools in the student's JupyterLab: a Validate that speaks
the course's language (server side: ``helpers.lab.validate``; the toolbar
button and dialog: ``helpers/lab/labextension``).

Enabled by the student's Jupyter configuration (coursekit/student/workspace.py
``configure``): the server extension ``helpers.lab`` and the labextension
folder on ``LabApp.extra_labextensions_path``; nbgrader's own Validate button
is switched off there.
"""
from __future__ import annotations

import json
from pathlib import Path

LABEXTENSIONS = Path(__file__).parent / "labextension"
ROUTE = "course/validate"


def _jupyter_server_extension_points():
    return [{"module": "helpers.lab"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from jupyter_server.base.handlers import APIHandler
    from jupyter_server.utils import url_path_join
    from tornado import web

    root = Path(serverapp.root_dir).resolve()

    class ValidateHandler(APIHandler):
        @web.authenticated
        async def post(self):
            import asyncio

            from .validate import validate
            path = (self.get_json_body() or {}).get("path", "")
            target = (root / path).resolve()
            if not target.is_relative_to(root) or target.suffix != ".ipynb" or not target.is_file():
                raise web.HTTPError(404, f"no notebook at {path!r}")
            config = _nbgrader_config(target.parent)
            result = await asyncio.get_running_loop().run_in_executor(None, validate, target, config)
            self.finish(json.dumps(result.as_json(), ensure_ascii=False))

    web_app = serverapp.web_app
    web_app.add_handlers(".*$", [(url_path_join(web_app.settings["base_url"], ROUTE), ValidateHandler)])
    serverapp.log.info("the course's Validate is at /%s", ROUTE)


def _nbgrader_config(folder: Path):
    """nbgrader's configuration as its own Validate reads it: the Jupyter
    configuration folders (the student's nbgrader_config.py is there) and the
    working directory."""
    from nbgrader.apps import NbGrader

    app = NbGrader()
    app.load_config_file()
    return app.config
