"""The course's commands (run inside the environment; see course.py)."""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from .base import chapters as course_base  # the chapter list, languages and ROOT (author modules load when used)


def cmd_source(args) -> int:
    from .author import build, probes
    names = args.chapters or course_base.chapters()
    for ch in names:
        path = build.write_source(ch, args.lang)
        print(f"source: {path.relative_to(course_base.ROOT)} ({args.lang})")
        notes: list[str] = []
        print(f"probes: {probes.write(ch, notes=notes).relative_to(course_base.ROOT)}")
        stored = probes.write_stored(ch)
        if stored is not None:
            print(f"stored: {stored.relative_to(course_base.ROOT)}")
        for note in notes:
            print(f"  {note}")
    return 0


def cmd_release(args) -> int:
    from .author import release
    names = args.chapters or course_base.chapters()
    for path in release.generate_releases(names):
        print(f"release: {path.relative_to(course_base.ROOT)}")
    return 0


def cmd_dist(args) -> int:
    from .author import dist
    for lang in args.langs or course_base.LANGS:
        path = dist.make_pack(lang)
        print(f"student pack: {path.relative_to(course_base.ROOT)}")
    return 0


def cmd_site(args) -> int:
    from .author import site
    argv = [*args.chapters, "--out", args.out] + (["--no-run"] if args.no_run else []) + \
        (["--jobs", str(args.jobs)] if args.jobs else [])
    return site.main(argv)


def cmd_check(args) -> int:
    from .author import check
    only = [k.strip() for k in args.parts.split(",") if k.strip()] if args.parts else None
    return check.check(args.chapter, only=only, root=Path(args.root) if args.root else course_base.ROOT, jobs=args.jobs)


def cmd_grade(args) -> int:
    from .grade import forkserver, kept
    if not args.let_go and not (kept.seconds() and kept.use_forkd(Path(args.root or course_base.ROOT))):
        forkserver.start()    # nbgrader's import, while the pipeline's own goes on
    from .grade import pipeline
    if args.let_go:
        from .grade import kept
        ended = kept.stop(Path(args.root or course_base.ROOT))
        print("grade: the kept warm kernel factory has ended" if ended else "grade: no warm kernel factory was kept")
        return 0
    if args.check:
        pipeline.check(root=args.root or course_base.ROOT, chapter=args.chapter, sandbox=not args.unsandboxed)
        return 0
    jobs = pipeline.grade(root=args.root or course_base.ROOT, chapter=args.chapter, student=args.student, jobs=args.jobs,
                          sandbox=not args.unsandboxed, timeout=args.timeout, regrade=args.regrade)
    return 0 if all(j.ok for j in jobs) else 1


def cmd_serve(args) -> int:
    from .serve import service
    return service.serve(Path(args.root or course_base.ROOT), Path(args.exchange) if args.exchange else None,
                         sandbox=not args.unsandboxed, poll=args.poll, class_files_every=args.class_files_every,
                         workers=args.jobs)


def _assignments(pairs) -> dict[str, int]:
    """--assignment ch01_attention=123 (repeated) -> {chapter: Canvas assignment id}."""
    out = {}
    for pair in pairs or ():
        chapter, _, aid = pair.partition("=")
        if not aid.strip().isdigit():
            raise course_base.BuildError(f"--assignment wants CHAPTER=ID (a Canvas assignment id), not {pair!r}")
        out[chapter.strip()] = int(aid)
    return out


def _canvas(args):
    """The Canvas course of --canvas-url / --canvas-course, the token from CANVAS_TOKEN (never on the command line)."""
    import os
    if not (args.canvas_url and args.canvas_course):
        return None, None
    token = os.environ.get("CANVAS_TOKEN", "")
    if not token:
        raise course_base.BuildError("Canvas needs an access token in the CANVAS_TOKEN environment variable "
                               "(Canvas: Account, Settings, New access token)")
    return token, args.canvas_course


@contextlib.contextmanager
def _canvas_errors(args):
    """Canvas unreachable or saying no: one line naming the server and course, no traceback."""
    from canvasapi.exceptions import CanvasException
    from requests import RequestException
    try:
        yield
    except (CanvasException, RequestException) as exc:
        raise course_base.BuildError(f"Canvas at {args.canvas_url}, course {args.canvas_course}: {exc}") from exc


def cmd_collect(args) -> int:
    from .lms import collect
    from .report import export
    root = Path(args.root or course_base.ROOT)
    token, course_id = _canvas(args)
    course = None
    if token:
        with _canvas_errors(args):
            course = export.canvas_course(args.canvas_url, token, course_id)
    try:
        result = collect.collect(root, [Path(p) for p in args.sources], lms=args.lms, worksheets=args.worksheet,
                                 timezone=args.timezone, canvas=course, assignment_ids=_assignments(args.assignment))
    except (ValueError, OSError) as exc:
        raise course_base.BuildError(str(exc)) from exc
    print(result.table())
    return 1 if result.left_out else 0


def cmd_replay(args) -> int:
    from .grade import recorder
    for ch in args.chapters or course_base.chapters():
        path = recorder.record(ch)
        print(f"{ch}: {path.relative_to(course_base.ROOT)}" if path.exists() else f"{ch}: no cell marked `replay`")
    return 0


def cmd_return(args) -> int:
    from .lms import handback
    root = Path(args.root or course_base.ROOT)
    token, course_id = _canvas(args)
    with _canvas_errors(args):
        result = handback.hand_back(root, chapter=args.chapter, canvas_url=args.canvas_url, token=token,
                                    canvas_course=course_id, assignment_ids=_assignments(args.assignment),
                                    send=args.send)
    print("\n".join(result.lines))
    return 1 if result.failed else 0


def _canvas_options(parser) -> None:
    parser.add_argument("--canvas-url", help="the Canvas server, e.g. https://canvas.example.edu "
                                             "(the token in the CANVAS_TOKEN environment variable)")
    parser.add_argument("--canvas-course", type=int, help="the Canvas course id (the number in its address)")
    parser.add_argument("--assignment", action="append", metavar="CHAPTER=ID",
                        help="the Canvas assignment of a chapter (default: the one named like the chapter)")


def _grade_parser(sub) -> None:
    g = sub.add_parser("grade", help="grade everything under submitted/ (autograde, feedback, grades.csv, report)")
    g.add_argument("--chapter", help="only this chapter, e.g. ch01_attention")
    g.add_argument("--student", help="only this student")
    g.add_argument("--jobs", type=int, help="parallel workers (default: number of cores)")
    g.add_argument("--timeout", type=int, default=600, help="time limit per notebook in seconds")
    g.add_argument("--root", help="the course folder to grade (default: this one), e.g. an instructor's "
                                  "course folder on JupyterHub")
    g.add_argument("--unsandboxed", action="store_true",
                   help="grade without bubblewrap (submissions then run with your rights)")
    g.add_argument("--regrade", action="store_true",
                   help="grade every notebook again, even those unchanged since they were graded")
    g.add_argument("--check", action="store_true",
                   help="only the preflight: start one graded kernel per chapter, write nothing")
    g.add_argument("--let-go", action="store_true",
                   help="end the warm kernel factory and fork server an earlier run kept for the next "
                        "one (COURSE_KEEP_WARM seconds, default 900; 0 keeps none), grading nothing")
    g.set_defaults(fn=cmd_grade)


def parser() -> argparse.ArgumentParser:
    """The course's commands and their options (``python course.py COMMAND``)."""
    p = argparse.ArgumentParser(prog="course", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("source", help="build source/ from notebooks/")
    s.add_argument("chapters", nargs="*")
    s.add_argument("--lang", default=course_base.DEFAULT_LANG, choices=course_base.LANGS)
    s.set_defaults(fn=cmd_source)
    rp = sub.add_parser("replay", help="record the outputs of the cells marked `replay` (replay/<chapter>.json)")
    rp.add_argument("chapters", nargs="*")
    rp.set_defaults(fn=cmd_replay)
    r = sub.add_parser("release", help="regenerate release/ from source/")
    r.add_argument("chapters", nargs="*")
    r.set_defaults(fn=cmd_release)
    d = sub.add_parser("dist", help="build the student packs (one zip per language) in dist/")
    d.add_argument("langs", nargs="*", choices=[[], *course_base.LANGS])
    d.set_defaults(fn=cmd_dist)
    w = sub.add_parser("site", help="the course as a static website, zh and en, in _site/ (coursekit/author/site.py)")
    w.add_argument("chapters", nargs="*", help="only these chapters (default: all)")
    w.add_argument("--out", default=str(course_base.ROOT / "_site"), help="the output folder (default: _site/)")
    w.add_argument("--no-run", action="store_true", help="leave the lecture outputs out (runs no chapter)")
    w.add_argument("--jobs", type=int, help="chapters run at once (default: number of cores)")
    w.set_defaults(fn=cmd_site)
    k = sub.add_parser("check", help="everything to pass after editing one chapter: build and sync, the rule and "
                                     "claims ledgers, its unit tests, the visible tests (zh, en), the hidden checks, "
                                     "a sample through nbgrader, content, browser, lint")
    k.add_argument("--chapter", required=True, help="the chapter, e.g. ch02_causal_mask")
    k.add_argument("--parts", help="only these parts, comma-separated: build, ledgers, unit, visible, hidden, "
                                   "nbgrader, content, browser, lint")
    k.add_argument("--jobs", type=int, help="parts run at once (default: the number of cores, at least 2)")
    k.add_argument("--root", help="the course folder to check (default: this one)")
    k.set_defaults(fn=cmd_check)
    _grade_parser(sub)
    v = sub.add_parser("serve", help="the grading service: grade each submission as it lands in nbgrader's "
                                     "exchange and release its feedback to its student")
    v.add_argument("--root", help="the course folder (default: this one), e.g. an instructor's on JupyterHub")
    v.add_argument("--exchange", help="nbgrader's exchange folder (default: Exchange.root of nbgrader's "
                                      "configuration, e.g. /srv/nbgrader/exchange)")
    v.add_argument("--jobs", type=int, help="notebooks graded at once (default: number of cores)")
    v.add_argument("--poll", type=float, default=0.5, help="seconds between looks at the exchange")
    v.add_argument("--class-files-every", type=float, default=60.0,
                   help="write grades.csv and the class report when idle, at most this often (seconds)")
    v.add_argument("--unsandboxed", action="store_true",
                   help="grade without bubblewrap (submissions then run with the service's rights)")
    v.set_defaults(fn=cmd_serve)
    c = sub.add_parser("collect", help="file what an LMS gave you (Canvas, Moodle, a folder or zip) into submitted/")
    c.add_argument("sources", nargs="+", metavar="FROM", help="archives or folders, oldest first")
    c.add_argument("--lms", default="auto", choices=("auto", "canvas", "moodle", "plain"),
                   help="the layout of the names (default: recognised from them)")
    c.add_argument("--worksheet", action="append", default=[],
                   help="Moodle's grading worksheet of the assignment (CSV), which maps participants to "
                        "students and gives the submission times")
    c.add_argument("--timezone", help="the time zone of times without one (Moodle's worksheet, file times); "
                                      "default: this machine's")
    c.add_argument("--root", help="the course folder (default: this one)")
    _canvas_options(c)
    c.set_defaults(fn=cmd_collect)
    b = sub.add_parser("return", help="hand back: Moodle's feedback-files archives, Canvas comments with the "
                                      "feedback page and the score (a dry run unless --send)")
    b.add_argument("--chapter", help="only this chapter")
    b.add_argument("--send", action="store_true", help="really send to Canvas (default: only say what would be sent)")
    b.add_argument("--root", help="the course folder (default: this one)")
    _canvas_options(b)
    b.set_defaults(fn=cmd_return)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except course_base.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
