"""The course on a real JupyterHub: release -> fetch -> submit -> collect ->
grade -> feedback, with nbgrader's exchange between real local accounts.

A JupyterHub from PyPI (its proxy from the npm registry) listens on
127.0.0.1 with the dummy authenticator and the local-process spawner, so each
person's server runs under their own uid. The test creates an instructor and
two students as system users and through the hub's REST API, starts their
servers, and then plays the course:

- the instructor releases ch01_attention (``nbgrader release_assignment``, as
  the instructor);
- each student fetches it, writes answers and submits through their own
  server's nbgrader API (what the Assignments tab calls), with their own token;
  one student's answers are right, the other's carry a catalogued bug;
- the instructor collects (``nbgrader collect``), grades with the course's
  pipeline (sandbox on; as root, which the sandbox's per-notebook uid needs)
  and returns feedback (``nbgrader release_feedback``);
- each student fetches their feedback through their server;
- then the grading service runs (``course.py serve``, as root): a student
  submits a wrong softmax and, with no instructor command, finds feedback
  naming the bug in their Assignments tab within 30 s; a corrected
  resubmission gets full marks the same way.

The students' servers start with the course's student configuration
(deploy/student_config.py): no formgrader, the course's own Validate, the
course's language; the instructor's server keeps nbgrader's tools.

Settings used here are what docs/deploy.md describes. Everything listens on
loopback, each wait is bounded, and the hub, the servers, the accounts and
the folders are removed at the end."""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from harness import ROOT, make_submission
from services import Unavailable, add_user, chp_command, closed_folders, free_port, is_root, remove_user, shared_tmpdir

from coursekit.grade.sandbox import sandbox_available
from grading import protocol

CH = "ch01_attention"
COURSE = protocol.COURSE_ID
BUG = "sm_no_max"           # tests/catalogue/ch01_attention.py: softmax without subtracting the row max
BIN = Path(sys.executable).parent
SANDBOX, WHY = sandbox_available()
# each person's server runs the course's environment and reads the course's code as that person
CLOSED = closed_folders(ROOT, BIN / "jupyterhub-singleuser", os.path.realpath(sys.prefix))
pytestmark = [
    pytest.mark.skipif(not is_root(), reason="needs root: creates system users and runs the hub's local spawner"),
    pytest.mark.skipif(bool(CLOSED), reason=f"other users cannot enter {', '.join(CLOSED)} (mode 0700?), so the "
                       "students' servers could not start the course's environment (the hub would answer HTTP "
                       "500): chmod o+x those folders, or put the checkout where everyone can enter"),
    pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"),
    pytest.mark.skipif(shutil.which("useradd") is None, reason="no useradd here"),
    pytest.mark.xdist_group("hub"),
    pytest.mark.system,
]

HUB_CONFIG = '''\
# JupyterHub settings of the course's deployment test (see docs/deploy.md)
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}
c.JupyterHub.db_url = "sqlite:///{hub_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{hub_dir}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{hub_dir}/jupyterhub.pid"

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {users!r}
c.Authenticator.admin_users = set()

c.JupyterHub.spawner_class = "localprocess"          # each server runs as its user's uid
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.ip = "127.0.0.1"
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"
# where nbgrader_config.py (the exchange) is; students' servers read the course's student
# configuration first (deploy/student_config.py: student-only tools, the course's Validate and language)
STUDENTS = {students!r}


def jupyter_config_path(spawner):
    student = [{student_config!r}] if spawner.user.name in STUDENTS else []
    return ":".join(student + [{config_path!r}])


c.Spawner.environment = {{"JUPYTER_CONFIG_PATH": jupyter_config_path}}
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90

# the test's admin client: a service with just the scopes it uses
c.JupyterHub.services = [{{"name": "course-admin", "api_token": {admin_token!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-admin", "services": ["course-admin"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "list:users"]}}]
'''

EXCHANGE_CONFIG = '''\
# nbgrader's exchange, for everyone on the machine (JupyterHub: /etc/jupyter/nbgrader_config.py)
c = get_config()  # noqa: F821
c.Exchange.root = {root!r}
c.CourseDirectory.course_id = {course!r}
'''


class Hub:
    """A running JupyterHub and the REST calls the test makes to it."""

    def __init__(self, base: Path, users: dict[str, str]):
        import requests
        self.http = requests.Session()
        self.base = base
        self.users = users                      # role -> user name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_hex(24)
        self.password = secrets.token_hex(8)     # the dummy authenticator's one password
        self.tokens: dict[str, str] = {}
        self.proc = None

    def start(self, chp: str, config_path: Path, student_config: Path, timeout: float = 90) -> None:
        hub_dir = self.base / "hub"
        hub_dir.mkdir()
        cfg = HUB_CONFIG.format(
            port=self.port, hub_port=free_port(), proxy_api_port=free_port(), chp=chp,
            proxy_token=secrets.token_hex(24), hub_dir=hub_dir, password=self.password,
            users=set(self.users.values()), singleuser=str(BIN / "jupyterhub-singleuser"),
            config_path=str(config_path), admin_token=self.admin_token,
            students={n for role, n in self.users.items() if role != "instructor"}, student_config=str(student_config))
        (hub_dir / "jupyterhub_config.py").write_text(cfg)
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("JUPYTERHUB_API_TOKEN", None)
        self.log = open(hub_dir / "jupyterhub.log", "w")
        self.proc = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(hub_dir / "jupyterhub_config.py")],
                                     cwd=hub_dir, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"JupyterHub exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if self.http.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                    return
            except Exception:  # noqa: BLE001 (not up yet)
                pass
            time.sleep(0.5)
        raise AssertionError(f"JupyterHub did not answer in {timeout} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        self.log.flush()
        return (self.base / "hub" / "jupyterhub.log").read_text(errors="replace")[-4000:]

    def api(self, method: str, path: str, token: str | None = None, **kw):
        headers = {"Authorization": f"token {token or self.admin_token}"}
        kw.setdefault("timeout", 60)
        return self.http.request(method, f"{self.url}/hub/api{path}", headers=headers, **kw)

    def server(self, name: str, method: str, path: str, token: str | None = None, **kw):
        """A request to user ``name``'s single-user server, through the hub's proxy."""
        headers = {"Authorization": f"token {token or self.tokens[name]}"}
        kw.setdefault("timeout", 120)
        return self.http.request(method, f"{self.url}/user/{name}/{path}", headers=headers, **kw)

    def start_servers(self, timeout: float = 150) -> None:
        names = list(self.users.values())
        r = self.api("POST", "/users", json={"usernames": names})
        assert r.status_code in (201, 409), r.text
        for name in names:
            r = self.api("POST", f"/users/{name}/tokens", json={"note": "course test", "expires_in": 3600})
            assert r.status_code == 201, r.text
            self.tokens[name] = r.json()["token"]
            r = self.api("POST", f"/users/{name}/server")
            assert r.status_code in (201, 202), r.text
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                model = self.api("GET", f"/users/{name}").json()
                if model.get("servers", {}).get("", {}).get("ready"):
                    pending.discard(name)
            time.sleep(1)
        assert not pending, f"servers not ready after {timeout} s: {pending}\n{self.log_tail()}"

    def stop(self) -> None:
        if self.proc is None:
            return
        for name in self.users.values():
            try:
                self.api("DELETE", f"/users/{name}/server", timeout=30)
            except Exception:  # noqa: BLE001 (best effort; the hub stops them too)
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:  # anything the hub left in its process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pidfile = self.base / "hub" / "jupyterhub-proxy.pid"   # the proxy, should the hub not have stopped it
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
        self.log.close()


def load_deploy_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("course_student_config", ROOT / "deploy" / "student_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def release_language(folder: Path) -> str:
    from coursekit.student.workspace import release_language as lang
    return lang(folder)


def as_user(name: str, args: list[str], cwd: Path, config_path: Path, timeout: float = 180,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run a command as the local user ``name``, with the course environment."""
    env = ["env", f"PATH={BIN}:/usr/bin:/bin", f"JUPYTER_CONFIG_PATH={config_path}", "PYTHONUTF8=1",
           f"HOME={Path(os.path.expanduser('~' + name))}"]
    r = subprocess.run(["runuser", "-u", name, "--", *env, *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, f"{args} as {name}: {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def can_read(name: str, path: Path, config_path: Path) -> bool:
    """Whether user ``name`` can list (a folder) or read (a file) ``path``."""
    cmd = ["ls", "-A", str(path)] if path.is_dir() else ["head", "-c", "1", str(path)]
    return as_user(name, cmd, Path("/"), config_path, timeout=30, check=False).returncode == 0


@pytest.fixture(scope="module")
def course_on_hub():
    try:
        chp = chp_command()
    except Unavailable as exc:
        pytest.skip(str(exc))
    tag = secrets.token_hex(3)
    users = {"instructor": f"tci{tag}", "good": f"tcs{tag}a", "buggy": f"tcs{tag}b"}
    base = shared_tmpdir("course-hub-")
    (base / "home").mkdir()
    os.chmod(base / "home", 0o755)
    created, hub = [], None
    try:
        accounts = {}
        for role, name in users.items():
            accounts[role] = add_user(name, base / "home" / name)
            created.append(name)
        # nbgrader's exchange, set up as nbgrader's documentation says: world-writable
        exchange = base / "exchange"
        exchange.mkdir()
        os.chmod(exchange, 0o777)               # mkdir -p /srv/nbgrader/exchange; chmod ugo+rw ...
        etc = base / "etc"
        etc.mkdir()
        (etc / "nbgrader_config.py").write_text(EXCHANGE_CONFIG.format(root=str(exchange), course=COURSE))
        os.chmod(etc, 0o755)
        # the instructor's course folder: this course's config, source and release of one chapter
        ins = accounts["instructor"]
        course = Path(ins.pw_dir) / COURSE
        course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for d in ("source", "release"):
            shutil.copytree(ROOT / d / CH, course / d / CH)
        subprocess.run(["chown", "-R", f"{ins.pw_uid}:{ins.pw_gid}", str(course)], check=True)

        # the students' Jupyter configuration, as deploy/student_config.py writes it for a hub
        student_config = load_deploy_script().write(base / "student-jupyter", release_language(ROOT / "release" / CH),
                                                    str(exchange), ROOT)
        hub = Hub(base, users)
        hub.start(chp, etc, student_config)
        hub.start_servers()
        yield {"hub": hub, "users": users, "accounts": accounts, "base": base, "exchange": exchange,
               "etc": etc, "course": course, "student_config": student_config}
    finally:
        if hub is not None:
            hub.stop()
        for name in created:
            remove_user(name)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def loop(course_on_hub):
    """The whole release -> ... -> feedback loop; each step's evidence for the tests."""
    c = course_on_hub
    hub, users, etc, course = c["hub"], c["users"], c["etc"], c["course"]
    ins = users["instructor"]
    out = {}

    # 1. the instructor releases the chapter
    as_user(ins, ["nbgrader", "release_assignment", CH, "--log-level=WARN"], course, etc)

    # 2. each student sees it, fetches it, answers and submits, through their own server
    source_nb = nbformat.read(ROOT / "source" / CH / f"{CH}.ipynb", as_version=4)
    import catalogue.ch01_attention as cat
    bug = next(b for b in cat.BUGS if b.name == BUG)
    answers = {"good": None, "buggy": bug.replace}
    for role in ("good", "buggy"):
        name = users[role]
        listed = hub.server(name, "GET", f"assignments?course_id={COURSE}")
        assert listed.status_code == 200, listed.text
        out[f"listed_{role}"] = listed.json()
        r = hub.server(name, "POST", "assignments/fetch", json={"course_id": COURSE, "assignment_id": CH})
        assert r.status_code == 200, r.text
        path = f"api/contents/{CH}/{CH}.ipynb"
        r = hub.server(name, "GET", path)
        assert r.status_code == 200, r.text
        released = nbformat.from_dict(r.json()["content"])
        answer = make_submission(released, source_nb, answers[role])
        r = hub.server(name, "PUT", path, json={"type": "notebook", "format": "json", "content": answer})
        assert r.status_code in (200, 201), r.text
        r = hub.server(name, "POST", "assignments/submit", json={"course_id": COURSE, "assignment_id": CH})
        assert r.status_code == 200, r.text
        body = r.json()
        assert not (isinstance(body, dict) and body.get("success") is False), body
    out["inbound"] = sorted(p.name for p in (c["exchange"] / COURSE / "inbound").iterdir())

    # a student's token opens only that student's server
    out["cross_token_status"] = hub.server(users["good"], "GET", "api/contents", token=hub.tokens[users["buggy"]],
                                           allow_redirects=False).status_code

    # 3. the instructor collects, grades (the course's pipeline, sandbox on), returns feedback
    as_user(ins, ["nbgrader", "collect", CH, "--log-level=WARN"], course, etc)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               JUPYTER_CONFIG_PATH=str(etc))
    env.pop("COURSE_DB_URL", None)
    r = subprocess.run([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(course), "--chapter", CH],
                       cwd=course, env=env, capture_output=True, text=True, timeout=420)
    out["grade_output"] = r.stdout + r.stderr
    assert r.returncode == 0, out["grade_output"][-4000:]
    as_user(ins, ["nbgrader", "release_feedback", CH, "--log-level=WARN"], course, etc)

    # 4. each student fetches the feedback through their server
    for role in ("good", "buggy"):
        name = users[role]
        r = hub.server(name, "POST", "assignments/fetch_feedback", json={"course_id": COURSE, "assignment_id": CH})
        assert r.status_code == 200, r.text
        listing = hub.server(name, "GET", f"api/contents/{CH}/feedback").json()
        stamps = [e["path"] for e in listing.get("content", []) if e["type"] == "directory"]
        assert stamps, f"no feedback for {role}: {listing}"
        r = hub.server(name, "GET", f"api/contents/{stamps[0]}/{CH}.html", params={"format": "text", "type": "file"})
        assert r.status_code == 200, r.text
        out[f"feedback_{role}"] = r.json()["content"]
    return out


def scores(course: Path, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE) as gb:
        sub = gb.find_submission_notebook(CH, CH, student)
        return {g.name: (g.auto_score, g.max_score) for g in sub.grades if g.auto_score is not None}


def test_a_student_logs_in_with_the_password(course_on_hub):
    import requests
    hub, name = course_on_hub["hub"], course_on_hub["users"]["good"]
    for password, ok in (("wrong" + hub.password, False), (hub.password, True)):
        with requests.Session() as s:
            s.get(f"{hub.url}/hub/login", timeout=30)
            r = s.post(f"{hub.url}/hub/login", data={"username": name, "password": password,
                                                     "_xsrf": s.cookies.get("_xsrf", "")},
                       allow_redirects=False, timeout=30)
            assert (r.status_code == 302) == ok, (password == hub.password, r.status_code, r.text[:300])
            if ok:
                home = s.get(f"{hub.url}/hub/home", timeout=30)
                assert home.status_code == 200 and name in home.text


def test_students_see_the_released_chapter(loop):
    for role in ("good", "buggy"):
        listed = loop[f"listed_{role}"]
        assert listed["success"] and [a["assignment_id"] for a in listed["value"]] == [CH], listed


def test_the_right_answer_gets_full_marks_and_the_wrong_one_does_not(loop, course_on_hub):
    users, course = course_on_hub["users"], course_on_hub["course"]
    good, buggy = scores(course, users["good"]), scores(course, users["buggy"])
    assert good and all(s == m for s, m in good.values()), good
    assert buggy["test_softmax"][0] < buggy["test_softmax"][1], buggy
    assert sum(s for s, _ in buggy.values()) < sum(s for s, _ in good.values())
    assert "sandbox on" in loop["grade_output"]


def test_students_get_their_own_feedback(loop):
    import catalogue.ch01_attention as cat
    words = next(b for b in cat.BUGS if b.name == BUG).words
    assert all(w in loop["feedback_buggy"] for w in words), "the diagnosis is in the buggy student's feedback"
    assert words[0] not in loop["feedback_good"]          # the diagnosis, said to its student only
    assert "BEGIN HIDDEN TESTS" not in loop["feedback_buggy"] + loop["feedback_good"]


def test_a_token_opens_only_its_own_server(loop):
    assert loop["cross_token_status"] in (403, 404), loop["cross_token_status"]


def test_exchange_permissions_are_nbgraders(loop, course_on_hub):
    ex, users = course_on_hub["exchange"], course_on_hub["users"]
    mode = lambda p: os.stat(p).st_mode & 0o7777  # noqa: E731
    assert mode(ex) == 0o777                          # world-writable root (nbgrader: chmod ugo+rw)
    assert mode(ex / COURSE) == 0o755                 # the course, owned by the instructor
    assert mode(ex / COURSE / "outbound") == 0o755    # released assignments: everyone reads
    assert mode(ex / COURSE / "inbound") == 0o2733    # submissions: everyone writes, nobody else lists
    assert mode(ex / COURSE / "feedback") == 0o711    # feedback: reachable by its hashed name only
    ins_uid = course_on_hub["accounts"]["instructor"].pw_uid
    for d in (ex / COURSE, ex / COURSE / "outbound", ex / COURSE / "inbound", ex / COURSE / "feedback"):
        assert os.stat(d).st_uid == ins_uid, d
    # one submission per student, each named student+assignment+time+random, owned by its student
    assert len(loop["inbound"]) == 2
    for role in ("good", "buggy"):
        [sub] = [n for n in loop["inbound"] if n.startswith(users[role] + "+" + CH + "+")]
        assert len(sub.split("+")) == 4, sub
        folder = ex / COURSE / "inbound" / sub
        assert os.stat(folder).st_uid == course_on_hub["accounts"][role].pw_uid
        assert mode(folder) == 0o777 and mode(folder / f"{CH}.ipynb") == 0o644


def test_students_cannot_read_each_other_or_the_instructors_files(loop, course_on_hub):
    c = course_on_hub
    users, etc, ex = c["users"], c["etc"], c["exchange"]
    inbound = ex / COURSE / "inbound"
    good_sub = next(inbound / n for n in loop["inbound"] if n.startswith(users["good"] + "+"))
    for who, other in (("buggy", "good"), ("good", "buggy")):
        me = users[who]
        assert not can_read(me, inbound, etc), "a student can list the submissions"
        assert not can_read(me, ex / COURSE / "feedback", etc), "a student can list the feedback"
        assert not can_read(me, Path(c["accounts"][other].pw_dir), etc), "a student can read another's home"
        assert not can_read(me, c["course"] / "source" / CH / f"{CH}.ipynb", etc), "a student can read source/"
        assert not can_read(me, c["course"] / "submitted", etc)
        assert not can_read(me, c["course"] / "gradebook.db", etc)
        assert can_read(me, ex / COURSE / "outbound" / CH / f"{CH}.ipynb", etc)   # the release is public
    # the instructor can read what was submitted (collect worked), a student only their own
    assert can_read(users["instructor"], good_sub / f"{CH}.ipynb", etc)


# ------------------------------------------------------------------ the students' servers

def lab_page_config(hub: Hub, name: str) -> dict:
    """The page configuration JupyterLab gives ``name``'s browser (its plugins and extensions)."""
    import json
    import re
    r = hub.server(name, "GET", "lab")
    assert r.status_code == 200, r.text[:500]
    m = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', r.text, re.S)
    assert m, r.text[:500]
    return json.loads(m.group(1))


def locale(hub: Hub, name: str) -> str:
    """JupyterLab's language for ``name``: the user's own setting, else the default (where a
    deployment's default_setting_overrides.json puts the course's)."""
    r = hub.server(name, "GET", "lab/api/settings/@jupyterlab/translation-extension:plugin")
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    return (body.get("settings") or {}).get("locale") or body["schema"]["properties"]["locale"].get("default", "")


def test_students_servers_have_the_course_tools_and_not_the_instructors(loop, course_on_hub):
    import json
    hub, users = course_on_hub["hub"], course_on_hub["users"]
    validate = json.loads((ROOT / "helpers" / "lab" / "labextension" / "transformer-course-validate" /
                           "package.json").read_text())["name"]
    lang = release_language(ROOT / "release" / CH)
    for role in ("good", "buggy"):
        name = users[role]
        cfg = lab_page_config(hub, name)
        off = set(cfg.get("disabledExtensions", []))
        assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:validate-assignment"} <= off, off
        assert "@jupyter/nbgrader:assignment-list" not in off
        assert validate in {e["name"] for e in cfg.get("federated_extensions", [])}
        assert hub.server(name, "GET", "formgrader", allow_redirects=False).status_code == 404
        assert locale(hub, name) == ("zh_CN" if lang == "zh" else "en")
    # the course's Validate, in the student's own server, on the student's own notebook
    r = hub.server(users["good"], "POST", "course/validate", json={"path": f"{CH}/{CH}.ipynb"}, timeout=240)
    assert r.status_code == 200, r.text[:1000]
    result = r.json()
    assert result["lang"] == lang and result["status"] == "passed", result
    # the instructor's server keeps nbgrader's tools and the default language
    ins = users["instructor"]
    assert "@jupyter/nbgrader:formgrader" not in set(lab_page_config(hub, ins).get("disabledExtensions", []))
    assert hub.server(ins, "GET", "formgrader", allow_redirects=False).status_code != 404
    assert locale(hub, ins) != "zh_CN"


# ------------------------------------------------------------------ the grading service

SERVICE_BUG = "sm_global_max"   # another wrong softmax than the loop's: the feedback must name this one
FEEDBACK_LIMIT_S = 30


def feedback_stamps(hub: Hub, name: str) -> list[str]:
    r = hub.server(name, "POST", "assignments/fetch_feedback", json={"course_id": COURSE, "assignment_id": CH})
    assert r.status_code == 200, r.text
    listing = hub.server(name, "GET", f"api/contents/{CH}/feedback").json()
    return sorted(e["path"] for e in listing.get("content", []) if e["type"] == "directory")


@pytest.fixture(scope="module")
def served(loop, course_on_hub):
    """The grading service runs (as root, the sandbox needs it); the buggy
    student submits a wrong softmax, then a corrected notebook, each time
    asking for feedback every second, as the Assignments tab's button does."""
    import catalogue.ch01_attention as cat
    c = course_on_hub
    hub, users, course = c["hub"], c["users"], c["course"]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", JUPYTER_CONFIG_PATH=str(c["etc"]))
    env.pop("COURSE_DB_URL", None)
    log_path = c["base"] / "serve.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "serve", "--root", str(course)], cwd=course,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = course / ".grading" / "service" / "handled.jsonl"
    out = {}
    try:
        deadline = time.monotonic() + 240   # it starts, then takes up what was submitted before it ran
        while time.monotonic() < deadline and proc.poll() is None:
            if record.exists() and len(record.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        assert proc.poll() is None and record.exists(), log_path.read_text()[-4000:]
        name = users["buggy"]
        released = nbformat.read(ROOT / "release" / CH / f"{CH}.ipynb", as_version=4)
        source = nbformat.read(ROOT / "source" / CH / f"{CH}.ipynb", as_version=4)
        bug = next(b for b in cat.BUGS if b.name == SERVICE_BUG)
        for label, answers in (("wrong", bug.replace), ("fixed", None)):
            before = set(feedback_stamps(hub, name))
            path = f"api/contents/{CH}/{CH}.ipynb"
            r = hub.server(name, "PUT", path, json={"type": "notebook", "format": "json",
                                                    "content": make_submission(released, source, answers)})
            assert r.status_code in (200, 201), r.text
            r = hub.server(name, "POST", "assignments/submit", json={"course_id": COURSE, "assignment_id": CH})
            assert r.status_code == 200, r.text
            t0 = time.monotonic()
            page = None
            while time.monotonic() - t0 < 2 * FEEDBACK_LIMIT_S and page is None:
                new = sorted(set(feedback_stamps(hub, name)) - before)
                if new:
                    r = hub.server(name, "GET", f"api/contents/{new[-1]}/{CH}.html",
                                   params={"format": "text", "type": "file"})
                    assert r.status_code == 200, r.text
                    page = r.json()["content"]
                else:
                    time.sleep(1)
            out[label] = {"seconds": time.monotonic() - t0, "page": page, "scores": scores(course, name)}
        out["bug"] = bug
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    out["log"] = log_path.read_text()
    return out


def test_the_service_hands_back_feedback_naming_the_bug_within_30_s(served):
    wrong = served["wrong"]
    assert wrong["page"] is not None, f"no feedback after {wrong['seconds']:.0f} s\n{served['log'][-3000:]}"
    assert wrong["seconds"] <= FEEDBACK_LIMIT_S, (wrong["seconds"], served["log"][-2000:])
    assert all(w in wrong["page"] for w in served["bug"].words), "the feedback names the bug"
    assert "BEGIN HIDDEN TESTS" not in wrong["page"]
    assert wrong["scores"]["test_softmax"][0] < wrong["scores"]["test_softmax"][1]


def test_a_corrected_resubmission_gets_full_marks_the_same_way(served):
    fixed = served["fixed"]
    assert fixed["page"] is not None, f"no feedback after {fixed['seconds']:.0f} s\n{served['log'][-3000:]}"
    assert fixed["seconds"] <= FEEDBACK_LIMIT_S, (fixed["seconds"], served["log"][-2000:])
    assert all(s == m for s, m in fixed["scores"].values()), fixed["scores"]
    assert served["bug"].words[0] not in fixed["page"]
